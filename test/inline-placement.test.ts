/**
 * The host device decides where a launch runs once per launch: its kernel's inline policy
 * (src/plugins/host/inline.ts) is asked once, whether the launch finds its queue idle or busy,
 * inline or not, so the policy's counts ("the next 16 launches go to the workers") are launches.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Offload, type Kernel } from '../src/index.js';
import type { InlinePolicy } from '../src/plugins/host/inline.js';
import { fixtureBundle } from './helpers/fixtures.js';

/** Counts the calls of `policy`'s choose (and its answers) and ranOnPool, leaving what they do as it is. */
function counted(policy: InlinePolicy): { choose: number; inline: number; onPool: number } {
  const counts = { choose: 0, inline: 0, onPool: 0 };
  const choose = policy.choose.bind(policy);
  const ranOnPool = policy.ranOnPool.bind(policy);
  policy.choose = (teams, timeoutMs) => {
    counts.choose++;
    const inline = choose(teams, timeoutMs);
    if (inline) counts.inline++;
    return inline;
  };
  policy.ranOnPool = (teams, micros) => {
    counts.onPool++;
    ranOnPool(teams, micros);
  };
  return counts;
}

function policyOf(kernel: Kernel): InlinePolicy {
  // The host device's loaded kernel (HostKernel) holds its policy.
  return (kernel.loaded as unknown as { policy: InlinePolicy }).policy;
}

describe('launch placement on the host device', { timeout: 60_000 }, () => {
  it('asks the policy once per launch, and sends the 16 launches after a run over budget to the workers', async () => {
    const runtime = await Offload.init({ host: { threads: 2, inline: 'auto' }, webgpu: false, proxies: [] });
    try {
      const device = runtime.devices[0]!;
      const empty = await device.kernel(await runtime.register(await fixtureBundle()), 'empty');
      const queue = device.queue();
      // A bounded kernel runs inline from its first launch; that run compiles it.
      await queue.launch(empty, { teams: 1 }, []).done;
      const policy = policyOf(empty);
      const counts = counted(policy);
      // An inline run over the budget (100 us for one team): the next 16 launches go to the workers.
      policy.ranInline(1, 100);
      for (let i = 0; i < 16; i++) await queue.launch(empty, { teams: 1 }, []).done; // each from an idle queue
      assert.deepEqual(counts, { choose: 16, inline: 0, onPool: 16 });

      // Behind a busy queue too: each launch is placed once, in its turn (8 of the next 16).
      policy.ranInline(1, 100);
      const events = Array.from({ length: 8 }, () => queue.launch(empty, { teams: 1 }, []));
      await Promise.all(events.map((event) => event.done));
      assert.deepEqual(counts, { choose: 24, inline: 0, onPool: 24 });
      for (let i = 0; i < 8; i++) await queue.launch(empty, { teams: 1 }, []).done;
      assert.deepEqual(counts, { choose: 32, inline: 0, onPool: 32 });
      await queue.finish();
    } finally {
      await runtime.shutdown();
    }
  });
});
