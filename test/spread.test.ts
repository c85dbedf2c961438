// runtime.spread: one launch over the host device and real `offload proxy` child processes, the
// same results as on one device, a proxy SIGKILLed half-way, and the bad inputs it refuses.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { generateXsbench, runXsbench, XSBENCH, type XsData } from '../src/apps/xsbench.js';
import { map, Offload, OffloadError, spread, type Library, type Runtime } from '../src/index.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';

const TOKEN = randomBytes(16).toString('hex');
const N = 100_003; // not a multiple of the elements a team: the last team's section is short
const TEAMS = 200;
const PER = Math.ceil(N / TEAMS);

function inputs(): { x: Float32Array; y: Float32Array } {
  const x = Float32Array.from({ length: N }, (_, i) => (i % 97) / 7);
  const y = Float32Array.from({ length: N }, (_, i) => (i % 31) - 15);
  return { x, y };
}

/** y = a * x + y as f32 arithmetic does it, the reference of every saxpy here. */
function saxpyExpected(a: number): Float32Array {
  const { x, y } = inputs();
  for (let i = 0; i < N; i++) y[i] = Math.fround(Math.fround(a * x[i]!) + y[i]!);
  return y;
}

function isCode(code: string, text?: RegExp): (error: unknown) => boolean {
  return (error) => {
    assert.ok(error instanceof OffloadError, String(error));
    assert.equal(error.code, code, error.message);
    if (text) assert.match(error.message, text);
    return true;
  };
}

describe('runtime.spread', { timeout: 240_000 }, () => {
  let bundle: string;
  let proxies: ProxyProcess[];
  let runtime: Runtime;
  let library: Library;
  let itemLibrary: Library;
  const infoLines: string[] = [];
  let data: XsData;

  before(async () => {
    // Before the runtime connects: making the data holds the event loop (no heartbeats heard).
    data = generateXsbench('small', 'hash');
    [bundle, ...proxies] = await Promise.all([
      fixtureBundle(),
      startProxy({ threads: 1, memory: '512M', token: TOKEN }),
      startProxy({ threads: 1, memory: '512M', token: TOKEN }),
    ]);
    runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 512 * 1024 * 1024 },
      webgpu: false,
      proxies: proxies.map((proxy) => proxy.address),
      token: proxies[0]!.token,
      info: (line) => infoLines.push(line),
    });
    assert.equal(runtime.devices.length, 3, 'the host device and one device of each proxy');
    library = await runtime.register(bundle);
    itemLibrary = await runtime.register(await fixtureBundle('test/fixtures/item-kernels.ts'));
  });
  after(async () => {
    await runtime?.shutdown();
    await Promise.all((proxies ?? []).map((proxy) => proxy.stop()));
  });

  it('spreads saxpy over the host device and two proxies with the result of one device', async () => {
    const one = inputs();
    const host = runtime.devices[0]!;
    await runtime.target(host, await host.kernel(library, 'saxpy'), { teams: 4 }, [
      N,
      2.5,
      map.to(one.x),
      map.tofrom(one.y),
    ]);
    const many = inputs();
    infoLines.length = 0;
    const result = await runtime.spread(runtime.devices, { library, name: 'saxpy' }, { teams: TEAMS }, [
      spread.span(PER, N),
      2.5,
      spread.part(map.to(many.x, 'x'), PER),
      spread.part(map.tofrom(many.y, 'y'), PER),
    ]);
    assert.deepEqual(many.y, one.y);
    assert.deepEqual(result.lost, []);
    assert.equal(
      result.shares.reduce((sum, share) => sum + share.units, 0),
      TEAMS,
    );
    assert.equal(result.shares.length, 3);
    for (const share of result.shares) assert.ok(share.chunks >= 1, `device ${share.device} ran a chunk`);
    for (const device of runtime.devices)
      assert.ok(
        infoLines.some((line) => line.includes(`device ${device.id} info: spread: 'saxpy' did `)),
        `OFFLOAD_INFO gives device ${device.id}'s share:\n${infoLines.join('\n')}`,
      );
    assert.ok(infoLines.some((line) => /spread: 'saxpy' teams \[0, \d+\) of 200/.test(line)));
  });

  it('spreads a per-item saxpy over { items } with sections that follow the items', async () => {
    const { x, y } = inputs();
    infoLines.length = 0;
    const result = await runtime.spread(runtime.devices, { library: itemLibrary, name: 'saxpy' }, { items: N }, [
      2.5,
      spread.part(map.to(x), 1),
      spread.part(map.tofrom(y), 1),
    ]);
    assert.deepEqual(y, saxpyExpected(2.5));
    assert.deepEqual(result.lost, []);
    assert.equal(
      result.shares.reduce((sum, share) => sum + share.units, 0),
      N,
    );
    for (const share of result.shares) assert.ok(share.chunks >= 1, `device ${share.device} ran a chunk`);
    assert.ok(infoLines.some((line) => new RegExp(`spread: 'saxpy' items \\[0, \\d+\\) of ${N}`).test(line)));
    // A Kernel of one device names the kernel on every device, as { library, name } does.
    const kernel = await runtime.devices[1]!.kernel(itemLibrary, 'saxpy');
    const again = inputs();
    await runtime.spread(runtime.devices, kernel, { items: N }, [
      2.5,
      spread.part(map.to(again.x), 1),
      spread.part(map.tofrom(again.y), 1),
    ]);
    assert.deepEqual(again.y, y);
  });

  it("spreads XSBench's lookups over the host device and two proxies with one device's checksum", async () => {
    const xsBundle = await fixtureBundle('examples/xsbench/kernels.ts');
    const one = await runXsbench(runtime, [runtime.devices[0]!], data, { bundle: xsBundle, lookups: 1000 });
    const all = await runXsbench(runtime, runtime.devices, data, { bundle: xsBundle, lookups: 1000 });
    assert.equal(one.checksum, XSBENCH.smoke[1000]);
    assert.equal(all.checksum, one.checksum);
    assert.equal(
      all.perDevice.reduce((a, b) => a + b),
      1000,
    );
    assert.ok(
      all.perDevice.every((lookups) => lookups > 0),
      `every device did lookups: ${all.perDevice.join(', ')}`,
    );
  });

  it('fails the spread when its kernel traps, as a launch does', async () => {
    await assert.rejects(
      runtime.spread(runtime.devices, { library, name: 'trap_abort' }, { teams: 64 }, [
        (chunk) => (chunk.first + chunk.count > 40 ? 1 : 0),
      ]),
      isCode('KERNEL_TRAP', /flag must be zero/),
    );
    // The devices go on.
    const again = inputs();
    await runtime.spread(runtime.devices, { library, name: 'saxpy' }, { teams: TEAMS }, [
      spread.span(PER, N),
      1,
      spread.part(map.to(again.x), PER),
      spread.part(map.tofrom(again.y), PER),
    ]);
  });

  it('refuses an argument whose section cannot follow the chunks, naming it', async () => {
    const { x, y } = inputs();
    const saxpy = { library, name: 'saxpy' };
    await assert.rejects(
      runtime.spread(runtime.devices, saxpy, { teams: TEAMS }, [N, 2.5, map.to(x), map.tofrom(y, 'y')]),
      isCode('INVALID_ARGUMENT', /argument 3 \('y'\): map\.tofrom of the whole array cannot follow the chunks/),
    );
    await assert.rejects(
      runtime.spread(runtime.devices, saxpy, { teams: TEAMS }, [
        N,
        2.5,
        map.to(x),
        spread.part(map.tofrom(y, 'y'), 10),
      ]),
      isCode(
        'INVALID_ARGUMENT',
        /argument 3 \('y'\): its sections cannot follow the chunks: 10 elements per team over 200 teams/,
      ),
    );
    await assert.rejects(
      runtime.spread(runtime.devices, saxpy, { teams: TEAMS }, [N, 2.5, map.to(x), 7]),
      isCode('INVALID_ARGUMENT', /argument 3 is a pointer parameter/),
    );
    const buffer = await runtime.devices[0]!.alloc(16);
    await assert.rejects(
      runtime.spread(runtime.devices, saxpy, { teams: TEAMS }, [N, 2.5, map.to(x), buffer as never]),
      isCode('INVALID_ARGUMENT', /argument 3 is a device buffer/),
    );
    await buffer.free();
    await assert.rejects(
      runtime.spread(runtime.devices, saxpy, { teams: TEAMS }, [N, 2.5, map.to(x)]),
      isCode('INVALID_ARGUMENT', /takes 4 arguments, got 3/),
    );
    await assert.rejects(
      runtime.spread(runtime.devices, saxpy, { items: N }, [N, 2.5, map.to(x), map.to(y)]),
      isCode(
        'INVALID_ARGUMENT',
        /range\.items needs a per-item kernel .*'saxpy' is written for teams: give \{ teams: n \}/,
      ),
    );
    const perItem = { library: itemLibrary, name: 'saxpy' };
    const itemArgs = [2.5, spread.part(map.to(x, 'x'), 1), spread.part(map.tofrom(y, 'y'), 1)];
    await assert.rejects(
      runtime.spread(runtime.devices, perItem, { teams: TEAMS }, itemArgs),
      isCode('INVALID_ARGUMENT', /'saxpy' is a per-item kernel .*give the range as \{ items: n \}/),
    );
    await assert.rejects(
      runtime.spread(runtime.devices, perItem, { items: [N, 1] } as never, itemArgs),
      isCode('INVALID_ARGUMENT', /range\.items must be one number/),
    );
    await assert.rejects(
      runtime.spread(runtime.devices, perItem, { items: 0 }, itemArgs),
      isCode('INVALID_ARGUMENT', /range\.items must be a positive integer, got number 0/),
    );
    await assert.rejects(
      runtime.spread(runtime.devices, perItem, { items: N * 2 }, itemArgs),
      isCode(
        'INVALID_ARGUMENT',
        /argument 1 \('x'\): its sections cannot follow the chunks: 1 element per item over 200006 items/,
      ),
    );
    await assert.rejects(
      runtime.spread(runtime.devices, { library, name: 'trap_abort' }, { teams: 8 }, [
        () => {
          throw new Error('no value for this chunk');
        },
      ]),
      isCode('INVALID_ARGUMENT', /argument 0 \(a function\) threw for teams \[\d+, \d+\): no value for this chunk/),
    );
    await assert.rejects(
      runtime.spread(runtime.devices, perItem, { items: N }, itemArgs, { chunksInFlight: 9 }),
      isCode('INVALID_ARGUMENT', /options\.chunksInFlight 9 is more than 8/),
    );
    await assert.rejects(
      runtime.spread(runtime.devices, { library, name: 'nope' }, { teams: 4 }, []),
      isCode('NOT_FOUND', /no kernel 'nope'/),
    );
  });

  it('refuses an empty device list and a device of another runtime, naming the device', async () => {
    const saxpy = { library, name: 'saxpy' };
    const { x, y } = inputs();
    const args = [spread.span(PER, N), 2.5, spread.part(map.to(x), PER), spread.part(map.tofrom(y), PER)];
    await assert.rejects(
      runtime.spread([], saxpy, { teams: TEAMS }, args),
      isCode('INVALID_ARGUMENT', /device list is empty/),
    );
    const other = await Offload.init({ host: { threads: 1 }, webgpu: false, proxies: [] });
    try {
      await assert.rejects(
        runtime.spread([runtime.devices[1]!, other.devices[0]!], saxpy, { teams: TEAMS }, args),
        isCode('INVALID_ARGUMENT', /devices\[1\], device 0 \(.+\), belongs to another runtime/),
      );
    } finally {
      await other.shutdown();
    }
    await assert.rejects(
      runtime.spread([runtime.devices[0]!, runtime.devices[0]!], saxpy, { teams: TEAMS }, args),
      isCode('INVALID_ARGUMENT', /listed twice/),
    );
  });
});

describe('runtime.spread with a proxy killed half-way', { timeout: 240_000 }, () => {
  it("re-runs the lost proxy's chunk on the other and names the lost proxy, for teams and for items", async () => {
    const [bundle, itemBundle] = await Promise.all([fixtureBundle(), fixtureBundle('test/fixtures/item-kernels.ts')]);
    const proxies = await Promise.all([
      startProxy({ threads: 1, token: TOKEN }),
      startProxy({ threads: 1, token: TOKEN }),
      startProxy({ threads: 1, token: TOKEN }),
    ]);
    const victim = proxies[1];
    // The items case: proxy 2, killed as it takes a chunk of items past the middle.
    const itemVictim = proxies[2];
    let killed = false;
    let itemKilled = false;
    const runtime = await Offload.init({
      host: false,
      webgpu: false,
      proxies: proxies.map((proxy) => proxy.address),
      token: proxies[0].token,
      // The kill comes as the victim takes a chunk past the middle: that chunk is in flight.
      info: (line) => {
        const match = /device 1 info: spread: 'saxpy' teams \[(\d+),/.exec(line);
        if (match && !killed && Number(match[1]) >= TEAMS / 2) {
          killed = true;
          victim.child.kill('SIGKILL');
        }
        const items = /device 2 info: spread: 'saxpy' items \[(\d+),/.exec(line);
        if (items && !itemKilled && Number(items[1]) >= N / 2) {
          itemKilled = true;
          itemVictim.child.kill('SIGKILL');
        }
      },
    });
    try {
      assert.equal(runtime.devices.length, 3);
      const library = await runtime.register(bundle);
      const expected = inputs();
      for (let i = 0; i < N; i++) expected.y[i] = Math.fround(Math.fround(2.5 * expected.x[i]!) + expected.y[i]!);
      const { x, y } = inputs();
      // Small chunks, so that both proxies take several.
      const result = await runtime.spread(
        runtime.devices.slice(0, 2),
        { library, name: 'saxpy' },
        { teams: TEAMS },
        [spread.span(PER, N), 2.5, spread.part(map.to(x), PER), spread.part(map.tofrom(y), PER)],
        { minChunk: 4, maxChunk: 8 },
      );
      assert.ok(killed, 'the victim took a chunk past the middle');
      assert.deepEqual(y, expected.y);
      assert.equal(result.lost.length, 1);
      const [lost] = result.lost;
      assert.equal(lost!.device, 1);
      assert.ok(lost!.name.includes(victim.address), `the loss names the proxy: ${lost!.name}`);
      assert.equal(lost!.error.code, 'DEVICE_LOST');
      assert.ok(
        lost!.rerun >= 1 && lost!.rerun <= 2,
        `its chunks in flight (1 or 2) ran again on the other proxy: ${lost!.rerun}`,
      );
      assert.equal(result.shares[0]!.units + result.shares[1]!.units, TEAMS);

      // The same over items of a per-item kernel, proxy 2 killed half-way.
      const itemLibrary = await runtime.register(itemBundle);
      const items = inputs();
      const itemResult = await runtime.spread(
        [runtime.devices[0]!, runtime.devices[2]!],
        { library: itemLibrary, name: 'saxpy' },
        { items: N },
        [2.5, spread.part(map.to(items.x), 1), spread.part(map.tofrom(items.y), 1)],
        { minChunk: 2000, maxChunk: 4000 },
      );
      assert.ok(itemKilled, 'the items victim took a chunk past the middle');
      assert.deepEqual(items.y, expected.y);
      assert.deepEqual(
        itemResult.lost.map((loss) => [loss.device, loss.error.code]),
        [[2, 'DEVICE_LOST']],
      );
      assert.ok(itemResult.lost[0]!.rerun >= 1, 'its chunks in flight ran again');
      assert.ok(itemResult.lost[0]!.name.includes(itemVictim.address), itemResult.lost[0]!.name);
      assert.equal(itemResult.shares[0]!.units + itemResult.shares[1]!.units, N);

      // With no device left, the spread fails with DEVICE_LOST naming it.
      proxies[0].child.kill('SIGKILL');
      const again = inputs();
      const failing = runtime.spread(
        [runtime.devices[0]!],
        { library, name: 'saxpy' },
        { teams: TEAMS },
        [spread.span(PER, N), 2.5, spread.part(map.to(again.x), PER), spread.part(map.tofrom(again.y), PER)],
        { maxChunk: 4 },
      );
      await assert.rejects(failing, isCode('DEVICE_LOST', /every device was lost \(device 0/));
    } finally {
      await runtime.shutdown({ graceMs: 0 });
      await Promise.all(proxies.map((proxy) => proxy.kill()));
    }
  });
});
