/**
 * One memory per client: a tenant's kernel that names every address of the 32-bit space (in
 * steps shorter than the other tenant's buffer, reading and overwriting each) never sees the
 * other tenant's bytes and leaves them intact. Checked between two contexts of one program,
 * between two clients of a real `offload proxy` (host device), and between two clients of a
 * proxy's WebGPU device.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Offload, OffloadError, type Device, type Runtime } from '../src/index.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';
import { webgpuSkipReason } from './helpers/webgpu.js';

const MAGIC = 0x7a3c91e5 | 0;
const SECRET_BYTES = 1 << 20;
/** Scan steps: shorter than the secret, so a scan that could reach it would land in it 4 times. */
const STEP = 1 << 18;
/** Addresses per launch: a region of 16 MiB, so each launch lies wholly inside memory or wholly beyond it. */
const PER_LAUNCH = (1 << 24) / STEP;

const secret = (): Int32Array => new Int32Array(SECRET_BYTES / 4).fill(MAGIC);

interface Scan {
  /** How many of the addresses held the magic. */
  hits: number;
  /** Regions whose launch ran (inside memory) and regions whose launch trapped (beyond it). */
  ran: number;
  trapped: number;
}

/** Runs scan_memory over all 4 GiB of addresses on `device`. */
async function scanEverything(runtime: Runtime, device: Device): Promise<Scan> {
  const scanMemory = await device.kernel(await runtime.register(await fixtureBundle()), 'scan_memory');
  const out = await device.alloc(64);
  const q = device.queue();
  await q.write(out, new Int32Array(16)).done;
  const result: Scan = { hits: 0, ran: 0, trapped: 0 };
  for (let region = 0; region < 2 ** 32 / (PER_LAUNCH * STEP); region++) {
    const start = region * PER_LAUNCH * STEP;
    try {
      await q.launch(scanMemory, { teams: 4 }, [start >>> 0, STEP, PER_LAUNCH, MAGIC, out]).done;
      result.ran++;
    } catch (error) {
      // Beyond the memory of its context, the kernel's load traps: it reaches nothing there.
      assert.ok(OffloadError.is(error, 'KERNEL_TRAP') && /out of bounds/.test(error.message), String(error));
      await q.finish().catch(() => {});
      result.trapped++;
    }
  }
  const counted = new Int32Array(1);
  await q.read(out, counted).done;
  result.hits = counted[0]!;
  await q.destroy();
  return result;
}

/** The victim's buffer, as it reads it back. */
async function readBack(device: Device, buffer: Awaited<ReturnType<Device['alloc']>>): Promise<Int32Array> {
  const back = new Int32Array(SECRET_BYTES / 4);
  await device.queue().read(buffer, back).done;
  return back;
}

describe('isolation between tenants', { timeout: 300_000 }, () => {
  it('two contexts of one host device: a scan of every address finds only its own buffer', async () => {
    const runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 64 * 1024 * 1024 },
      webgpu: false,
      proxies: [],
    });
    try {
      const victim = await runtime.createContext();
      const attacker = await runtime.createContext();
      const hidden = await victim.devices[0]!.alloc(SECRET_BYTES);
      await victim.devices[0]!.queue().write(hidden, secret()).done;
      // The attacker plants the same magic in its own memory: the scan must find exactly that.
      const own = await attacker.devices[0]!.alloc(SECRET_BYTES);
      await attacker.devices[0]!.queue().write(own, secret()).done;
      // A context's memory reaches as far as it has allocated: the static window, its buffer and
      // this pad fill the first 16 MiB region exactly (the scan's own 64 bytes come after).
      await attacker.devices[0]!.alloc((1 << 24) - (1 << 20) - SECRET_BYTES);
      const scan = await scanEverything(attacker, attacker.devices[0]!);
      assert.equal(scan.hits, SECRET_BYTES / STEP, 'the scan found its own buffer, and only that');
      assert.equal(scan.ran + scan.trapped, 256);
      assert.equal(scan.ran, 1, 'the region inside the memory it allocated ran; the rest trapped');
      assert.deepEqual(await readBack(victim.devices[0]!, hidden), secret(), "the other context's bytes are intact");
    } finally {
      await runtime.shutdown();
    }
  });

  describe('two clients of one proxy, host device', () => {
    let proxy: ProxyProcess;
    before(async () => {
      proxy = await startProxy({ threads: 2, memory: '64M' });
    });
    after(async () => {
      await proxy?.stop();
    });

    it("a client's scan of every address never sees or changes another client's buffer", async () => {
      const victim = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
      const attacker = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
      try {
        const hidden = await victim.devices[0]!.alloc(SECRET_BYTES);
        await victim.devices[0]!.queue().write(hidden, secret()).done;
        // The attacker's memory reaches only as far as it allocated: this fills the first region.
        await attacker.devices[0]!.alloc((1 << 24) - (1 << 20));
        const scan = await scanEverything(attacker, attacker.devices[0]!);
        assert.equal(scan.hits, 0, "the attacker saw the victim's magic");
        assert.ok(
          scan.ran >= 1 && scan.trapped >= 1,
          `the scan covered its memory and beyond (${JSON.stringify(scan)})`,
        );
        assert.deepEqual(await readBack(victim.devices[0]!, hidden), secret(), "the victim's bytes are intact");
        // The attacker overwrote every 256 KiB of the memory it can reach: a buffer the victim
        // gets now holds none of that (it would, were their memories one).
        const fresh = await victim.devices[0]!.alloc(SECRET_BYTES);
        assert.deepEqual(await readBack(victim.devices[0]!, fresh), new Int32Array(SECRET_BYTES / 4));
      } finally {
        await attacker.shutdown();
        await victim.shutdown();
      }
    });
  });

  describe('two clients of one proxy, WebGPU device', async () => {
    const skip = await webgpuSkipReason();
    let proxy: ProxyProcess;
    before(async () => {
      if (!skip) proxy = await startProxy({ threads: 1, memory: '16M', webgpu: 'fallback' });
    });
    after(async () => {
      await proxy?.stop();
    });

    it("a client's scan of every index never sees or changes another client's buffer", { skip }, async () => {
      const victim = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
      const attacker = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
      try {
        const gpu = (runtime: Runtime): Device => runtime.devices.find((device) => device.info.kind === 'gpu')!;
        const hidden = await gpu(victim).alloc(SECRET_BYTES);
        await gpu(victim).queue().write(hidden, secret()).done;
        const scan = await scanEverything(attacker, gpu(attacker));
        assert.equal(scan.hits, 0, "the attacker saw the victim's magic");
        assert.equal(scan.trapped, 0, 'WGSL accesses beyond a binding are clamped, never trapped');
        assert.deepEqual(await readBack(gpu(victim), hidden), secret(), "the victim's bytes are intact");
      } finally {
        await attacker.shutdown();
        await victim.shutdown();
      }
    });
  });
});
