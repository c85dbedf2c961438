/**
 * The polling policy (src/transport/poll-policy.ts), fed loads and arrival times: it spins while
 * the machine has a core to spare and spins find their frame; on a crowded machine it tries
 * sleeping and spinning and keeps what pays (a client and a proxy modelled on one core and on
 * two, and moved from one to the other), while an MPI job's ranks counted on too few cores sleep;
 * it backs off after spins that found nothing and comes back when a probe finds one, stops when
 * a wake-up costs nothing, and OFFLOAD_POLL_US overrides all of it; each change is said once, in
 * words. Then the same policy in a process: a client says under OFFLOAD_DEBUG what it chose, and
 * beside a busy process per core, what its trial found (or that it shares its proxy's core).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { AUTO_POLL_US, PollPolicy } from '../src/transport/poll-policy.js';
import { pollOverride } from '../src/transport/poll-window.js';
import { startCpuHog } from './helpers/cpu-hog.js';
import { launchingClient } from './helpers/launching-client.js';
import { startProxy } from './helpers/proxy.js';

/**
 * The windows of `count` expected frames, each arriving `gapUs` after it was expected (a
 * function: of the window it got; a frame slept for comes a wake-up later).
 */
function windows(policy: PollPolicy, count: number, gapUs: number | ((windowUs: number) => number)): number[] {
  const seen: number[] = [];
  for (let i = 0; i < count; i++) {
    const windowUs = policy.window();
    seen.push(windowUs);
    policy.arrived(typeof gapUs === 'number' ? gapUs : gapUs(windowUs));
  }
  return seen;
}

/** A peer that answers in 12 us, seen 70 us later by a thread that slept (a VM's wake-up). */
const quickPeer = (windowUs: number): number => (windowUs > 0 ? 12 : 82);

/**
 * When a side of a crowded machine sees a frame: it expected it from `expectedAt`, spinning for
 * `windowUs` (0: asleep); the frame came at `comesAt`, and its sender then spun `senderWindowUs`
 * for the next one. Times in us.
 */
type Seen = (expectedAt: number, windowUs: number, comesAt: number, senderWindowUs: number, launch: number) => number;

/**
 * Beside one busy process per core, the peer on another core: a spin sees a frame as it comes
 * and takes nothing from the peer; a frame that comes after the spin (or to a sleeper) is seen
 * 175 us later (the wake-up crosses to a core that runs a busy process). With the proxy's 5 us
 * and the client's 2: both asleep 357 us a round trip, one spinning 182, both 7.
 */
const otherCore: Seen = (expectedAt, windowUs, comesAt) => (comesAt <= expectedAt + windowUs ? comesAt : comesAt + 175);

/**
 * The peer on the same core: a sleeper is woken in 20 us; but nobody else runs on the core while
 * the sender spins, so a frame is seen only once the sender's spin is over, and a spin never
 * sees the frame it spins for (its peer cannot make it meanwhile). As measured pinned beside a
 * busy process (bench/README.md): both asleep 47 us a round trip, one spinning 50 us 77, both 107.
 */
const sameCore: Seen = (expectedAt, windowUs, comesAt, senderWindowUs) => {
  const ready = comesAt + senderWindowUs;
  return ready <= expectedAt + windowUs ? ready : Math.max(ready, comesAt + 20);
};

/**
 * A client and a proxy on a machine crowded by a load (three runnable threads besides each: a busy
 * process per core and the peer), answering each other for 12,000 launches. The proxy answers in
 * 5 us; the client sends its next request 2 us after it sees the reply; each side starts its
 * window for the next frame as it sends. Returns the client's round trips and, over the last 2000
 * launches, the share each side spun for.
 */
function crowdedPair(seen: Seen) {
  const client = new PollPolicy({ cores: 2, random: seeded(1) });
  const proxy = new PollPolicy({ cores: 2, random: seeded(2) });
  client.observeLoad(3);
  proxy.observeLoad(3);
  const LAUNCHES = 12_000;
  let proxyExpected = 0;
  let proxyWindow = proxy.window();
  let sent = 0;
  const spun = { client: 0, proxy: 0 };
  const trips: number[] = [];
  for (let launch = 0; launch < LAUNCHES; launch++) {
    const clientWindow = client.window();
    const proxySaw = seen(proxyExpected, proxyWindow, sent, clientWindow, launch);
    proxy.arrived(proxySaw - proxyExpected);
    if (launch >= LAUNCHES - 2000) {
      spun.client += clientWindow > 0 ? 1 / 2000 : 0;
      spun.proxy += proxyWindow > 0 ? 1 / 2000 : 0;
    }
    const replied = proxySaw + 5;
    proxyExpected = replied;
    proxyWindow = proxy.window();
    const clientSaw = seen(sent, clientWindow, replied, proxyWindow, launch);
    client.arrived(clientSaw - sent);
    trips.push(clientSaw - sent);
    sent = clientSaw + 2;
  }
  return { client, proxy, trips, spun };
}

/** A deterministic stand-in for Math.random (mulberry32), one sequence per seed. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), state | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

/** The median and the mean of `trips`. */
function summary(trips: number[]): { median: number; mean: number; text: string } {
  const sorted = [...trips].sort((a, b) => a - b);
  const median = sorted[sorted.length >> 1]!;
  const mean = trips.reduce((sum, trip) => sum + trip, 0) / trips.length;
  return { median, mean, text: `median ${median} us, mean ${mean.toFixed(1)} us` };
}

describe('the polling policy', { timeout: 60_000 }, () => {
  it('spins on a machine with a core to spare while frames come within the spin', () => {
    const policy = new PollPolicy({ cores: 2 });
    policy.observeLoad(0.5);
    const seen = windows(policy, 400, quickPeer);
    // The 32nd expected frame is slept for, to learn what a wake-up costs; then, as a sleep adds
    // 70 us to a 12 us reply, one frame in 292 (the samples add 2 % to the average reply).
    assert.deepEqual(
      seen.flatMap((w, i) => (w === 0 ? [i] : [])),
      [31, 31 + 292],
    );
    assert.ok(seen.every((w) => w === 0 || w === AUTO_POLL_US));
    assert.equal(policy.mode, 'spin');
    assert.match(policy.describe(), /spins up to 50 us for every frame expected \(0\.50 runnable threads besides/);
  });

  it('sleeps while the other runnable threads do not fit in the other cores, and spins again when they do', () => {
    const policy = new PollPolicy({ cores: 2 });
    policy.observeLoad(0.2);
    assert.equal(policy.changed()?.startsWith('spins'), true);
    assert.equal(policy.changed(), undefined, 'a mode is said once');
    // One busy process per core, smoothed in over a few samples.
    for (let i = 0; i < 10; i++) policy.observeLoad(2);
    assert.equal(policy.mode, 'crowded');
    // Its first trial: of each pair of frames one slept for, one spun for.
    const pairs = windows(policy, 6, 10);
    for (let i = 0; i < 6; i += 2) assert.deepEqual([pairs[i]! > 0, pairs[i + 1]! > 0].sort(), [false, true]);
    assert.match(
      policy.changed()!,
      /sleeps: 1\.\d\d runnable threads besides this one do not fit in the other 1 of 2 cores/,
    );
    // Hysteresis: just under one other thread is not enough to spin again; well under is.
    for (let i = 0; i < 20; i++) policy.observeLoad(0.9);
    assert.equal(policy.mode, 'crowded');
    for (let i = 0; i < 20; i++) policy.observeLoad(0.3);
    assert.equal(policy.mode, 'spin');
    // One core: anything else runnable takes it.
    const single = new PollPolicy({ cores: 1 });
    single.observeLoad(1);
    assert.equal(single.mode, 'crowded');
    single.observeLoad(Number.NaN); // ignored
    assert.equal(single.mode, 'crowded');
  });

  it('backs off after three spins that found nothing, probing ever more rarely; a probe that finds its frame restores it', () => {
    const policy = new PollPolicy({ cores: 4 });
    policy.observeLoad(0);
    // The peer computes for 2 ms per request: spins find nothing.
    const seen = windows(policy, 3 + 2 + 4 + 8 + 16 + 32 + 64 + 64, 2000);
    assert.deepEqual(seen.slice(0, 3), [50, 50, 50]);
    assert.equal(policy.mode, 'backed-off');
    // After the third miss: a probe at the 2nd, then 4th, 8th, ... 64th expected frame, then every 64th.
    const probes = seen.flatMap((w, i) => (w > 0 && i >= 3 ? [i - 3] : []));
    assert.deepEqual(probes, [1, 5, 13, 29, 61, 125, 189]);
    assert.match(
      policy.describe(),
      /sleeps: spins found nothing \(the peer takes longer than 50 us\); spins for one expected frame in 64/,
    );
    // The peer answers quickly again: the next probe finds it, and spinning resumes.
    const back = windows(policy, 100, quickPeer);
    const firstSpin = back.findIndex((w) => w > 0);
    assert.ok(firstSpin >= 0 && firstSpin < 64, String(firstSpin));
    // That probe spun as long as the frames slept for before it took to be seen.
    assert.equal(back[firstSpin], 82);
    // Spinning from there on, but for a frame slept for now and then.
    assert.ok(back.slice(firstSpin + 1, firstSpin + 21).filter((w) => w === 50).length >= 19, String(back));
    assert.equal(policy.mode, 'spin');
  });

  it('where a sleep adds many windows, backs off after as many misses; probes as long as a sleep takes; one probe that finds its frame forgives misses for 64 frames', () => {
    const policy = new PollPolicy({ cores: 2 });
    policy.knowOthers(1);
    // Replies seen 600 us after a sleep (over MPI), then a peer that computes for 2 ms: a sleep
    // adds 585 us, 12 windows, so 12 misses in a row back off, not 11.
    windows(policy, 40, (windowUs) => (windowUs > 0 ? 15 : 600));
    windows(policy, 11, 2000);
    assert.equal(policy.mode, 'spin');
    windows(policy, 1, 2000);
    assert.equal(policy.mode, 'backed-off');
    assert.deepEqual(windows(policy, 1, 2000), [0]);
    // The probe, the 2nd frame, spins 600 us, and finds its frame 400 us on: spinning again,
    // through 64 misses, not 65.
    assert.equal(policy.window(), 600);
    policy.arrived(400);
    assert.equal(policy.mode, 'spin');
    windows(policy, 64, 2000);
    assert.equal(policy.mode, 'spin');
    windows(policy, 12, 2000);
    assert.equal(policy.mode, 'backed-off');
  });

  it('two ranks that answer each other at once do not both end up asleep after a slow start', () => {
    // A client and a proxy, each with its own policy. A frame spun for is seen as it comes; one
    // slept for 300 us later (a progress thread's look and a wake). The proxy answers in 5 us,
    // but the first five launches take 5 ms (a kernel compiles). Backing off at three misses
    // there left each side's probes missing the other asleep: 600 us round trips for good.
    const client = new PollPolicy({ cores: 2 });
    const proxy = new PollPolicy({ cores: 2 });
    client.knowOthers(1);
    proxy.knowOthers(1);
    const SLEEP_US = 300;
    const seen = (windowUs: number, comesUs: number) => (comesUs <= windowUs ? comesUs : comesUs + SLEEP_US);
    let proxyWindow = proxy.window();
    let clientSawLast = 0;
    const trips: number[] = [];
    for (let launch = 0; launch < 600; launch++) {
      const clientWindow = client.window();
      // The request comes clientSawLast + 2 us after the proxy answered the previous one.
      const proxySaw = seen(proxyWindow, clientSawLast + 2);
      proxy.arrived(proxySaw);
      const replyComes = proxySaw - (clientSawLast + 2) + (launch < 5 ? 5000 : 5);
      proxyWindow = proxy.window();
      clientSawLast = seen(clientWindow, replyComes);
      client.arrived(clientSawLast);
      trips.push(clientSawLast);
    }
    const late = trips.slice(-200).sort((a, b) => a - b);
    assert.ok(late[100]! < 50, `median round trip of the last 200: ${late[100]} us`);
    assert.equal(client.mode, 'spin');
    assert.equal(proxy.mode, 'spin');
  });

  it('on a machine crowded by a load, spins where a trial shows it pays: the peer on another core', () => {
    const { client, proxy, trips } = crowdedPair(otherCore);
    const late = summary(trips.slice(-2000));
    assert.ok(late.median < 20 && late.mean < 60, `the last 2000 round trips: ${late.text}`);
    assert.equal(client.mode, 'crowd-spin');
    assert.equal(proxy.mode, 'crowd-spin');
    assert.match(
      client.describe(),
      /^spins up to \d+ us for every frame expected: frames spun for came in \d+ us, slept for in \d+ us, though 3 runnable threads besides this one do not fit in the other 1 of 2 cores$/,
    );
  });

  it('on a machine crowded by a load, keeps sleeping where the peer shares its core and both would spin', () => {
    // Both sides try at the same frames (they count the same launches): both asleep 45 us, both
    // spinning 205 us.
    const { client, proxy, trips, spun } = crowdedPair(sameCore);
    const late = summary(trips.slice(-2000));
    assert.ok(late.median <= 45 && late.mean < 50, `the last 2000 round trips: ${late.text}`);
    assert.ok(spun.client < 0.05 && spun.proxy < 0.05, `spun for: client ${spun.client}, proxy ${spun.proxy}`);
    assert.equal(client.mode, 'crowded');
    assert.equal(proxy.mode, 'crowded');
    assert.match(
      client.describe(),
      /^sleeps: 3 runnable threads besides this one do not fit in the other 1 of 2 cores; a spin brought frames no sooner \(\d+ us against 45 us slept for\)$/,
    );
  });

  it('on a crowded machine, a trial takes frames slept for and spun for in turns, and ends after two spun for clearly later', () => {
    // Slept for: 45 us. Spun for on a shared core: each frame waits out the spin, 150 us; one late
    // frame alone (the busy process took the core) does not end the trial. Each pair's order is a
    // coin's: here the sleep comes first in every pair.
    const policy = new PollPolicy({ cores: 2, random: () => 0.9 });
    policy.observeLoad(3);
    const spunFor = [150, 20, 20, 150, 150];
    const seen = windows(policy, 30, (windowUs) => (windowUs === 0 ? 45 : spunFor.shift()!));
    assert.deepEqual(
      seen.map((w) => w > 0),
      [false, true, false, true, false, true, false, true, false, true, ...Array<boolean>(20).fill(false)],
      'spun-for frames 1 late, 2-3 sooner, 4-5 late: the trial ends there',
    );
    const order = new PollPolicy({ cores: 2, random: seeded(7) });
    order.observeLoad(3);
    const pairs = windows(order, 32, 45).map((w) => w > 0);
    for (let i = 0; i < 32; i += 2)
      assert.notEqual(pairs[i], pairs[i + 1], `pair ${i / 2}: one slept for, one spun for`);
    assert.ok(pairs.filter((spun, i) => spun && i % 2 === 0).length >= 4, 'either comes first');
    assert.equal(policy.mode, 'crowded');
    assert.match(policy.describe(), /a spin brought frames no sooner \(150 us against 45 us slept for\)$/);
  });

  it("on a crowded machine, a trial's verdict does not hang on the peer changing its mind halfway", () => {
    // The peer on another core spins for 16 frames, then sleeps for 16 (its own trial, say). A
    // spin here always saves the 175 us of a wake-up; sixteen frames slept for while the peer
    // spun and sixteen spun for while it slept would come alike (185 us) and say it does not.
    const policy = new PollPolicy({ cores: 2, random: seeded(3) });
    policy.observeLoad(3);
    let frame = 0;
    windows(policy, 32, (windowUs) => {
      const peerSpins = Math.floor(frame++ / 16) % 2 === 0;
      return (peerSpins ? 10 : 185) + (windowUs > 0 ? 0 : 175);
    });
    assert.equal(policy.mode, 'crowd-spin');
    assert.match(policy.describe(), /frames spun for came in \d+ us, slept for in \d+ us/);
  });

  it('on a crowded machine, tries again when the scheduler moves the peer to another core', () => {
    // The same core until launch 6000, with a verdict held for up to 4096 frames; then another
    // core. Held frames coming much later than the trial's call a trial there and then.
    const { client, proxy, trips } = crowdedPair((expectedAt, windowUs, comesAt, senderWindowUs, launch) =>
      (launch < 6000 ? sameCore : otherCore)(expectedAt, windowUs, comesAt, senderWindowUs, launch),
    );
    const before = summary(trips.slice(5000, 6000));
    const after = summary(trips.slice(6200, 8000));
    assert.ok(before.median <= 45, `before the move: ${before.text}`);
    assert.ok(after.median < 20, `after the move: ${after.text}`);
    assert.equal(client.mode, 'crowd-spin');
    assert.equal(proxy.mode, 'crowd-spin');
  });

  it('holding a spin on a crowded machine, sleeps after three frames later than the longest spin, and tries again', () => {
    const { client } = crowdedPair(otherCore);
    assert.equal(client.mode, 'crowd-spin');
    // The program pauses 5 ms between launches; a frame later than a spin but within 1 ms is no reason.
    windows(client, 2, 900);
    assert.equal(client.mode, 'crowd-spin');
    windows(client, 3, 5000);
    assert.equal(client.mode, 'crowded');
    assert.match(client.describe(), /; spins found nothing 3 times in a row \(the peer pauses\)$/);
    // The next trial, within 256 frames: it sleeps for 16 and spins for 16, and spins pay again.
    const seen = windows(client, 300, (windowUs) => (windowUs > 0 ? 5 : 180));
    assert.ok(seen.slice(0, 200).filter((w) => w > 0).length <= 16, 'asleep until the trial but for its spins');
    assert.equal(client.mode, 'crowd-spin');
  });

  it("never spins while an MPI job's ranks counted on this host do not fit in its cores", () => {
    const three = new PollPolicy({ cores: 2 });
    three.knowOthers(2);
    assert.ok(windows(three, 1000, (windowUs) => (windowUs > 0 ? 5 : 400)).every((w) => w === 0));
    assert.equal(three.mode, 'crowded');
  });

  it("counts an MPI job's ranks on this host exactly, in its own words", () => {
    const words = ['other rank of this job on this host', 'other ranks of this job on this host'] as const;
    const pair = new PollPolicy({ cores: 2, others: words });
    pair.knowOthers(1);
    assert.equal(pair.mode, 'spin');
    assert.match(pair.describe(), /\(1 other rank of this job on this host, 2 cores\)/);
    const three = new PollPolicy({ cores: 2, others: words });
    three.knowOthers(2);
    assert.equal(three.window(), 0);
    assert.match(
      three.describe(),
      /sleeps: 2 other ranks of this job on this host do not fit in the other 1 of 2 cores/,
    );
  });

  it('a miss now and then does not back off', () => {
    const policy = new PollPolicy({ cores: 2 });
    policy.observeLoad(0);
    for (let i = 0; i < 50; i++) {
      const windowUs = policy.window();
      policy.arrived(windowUs === 0 ? 82 : i % 3 === 2 ? 500 : 10);
    }
    assert.equal(policy.mode, 'spin');
  });

  it('stops spinning where a wake-up adds almost nothing to a reply, and keeps spinning where it adds much', () => {
    const cheap = new PollPolicy({ cores: 2 });
    const dear = new PollPolicy({ cores: 2 });
    for (const [policy, sleptUs] of [
      [cheap, 12],
      [dear, 70],
    ] as const) {
      policy.observeLoad(0);
      for (let i = 0; i < 40; i++) {
        // Frames spun for come after 10 us; slept for, after the wake-up too.
        policy.arrived(policy.window() > 0 ? 10 : sleptUs);
      }
    }
    assert.equal(cheap.mode, 'cheap-wake');
    assert.match(cheap.describe(), /a wake-up adds 2\.0 us to a reply, less than a spin saves/);
    // Probes every 16th frame.
    const probes = windows(cheap, 32, 10).flatMap((w, i) => (w > 0 ? [i] : []));
    assert.equal(probes.length, 2, String(probes));
    assert.equal(probes[1]! - probes[0]!, 16);
    assert.equal(dear.mode, 'spin');
  });

  it('OFFLOAD_POLL_US overrides everything: that window always, 0 never; unset or empty leaves the policy', () => {
    const fixed = new PollPolicy({ cores: 1, overrideUs: 80 });
    fixed.observeLoad(10);
    assert.deepEqual(windows(fixed, 10, 5000), Array(10).fill(80));
    assert.equal(fixed.mode, 'override');
    assert.equal(fixed.describe(), 'OFFLOAD_POLL_US=80: spins 80 us for every frame expected');
    const off = new PollPolicy({ cores: 8, overrideUs: 0 });
    assert.deepEqual(windows(off, 3, 1), [0, 0, 0]);
    assert.equal(off.describe(), 'OFFLOAD_POLL_US=0: sleeps as soon as nothing is ready');
    assert.equal(pollOverride({}), undefined);
    assert.equal(pollOverride({ OFFLOAD_POLL_US: '' }), undefined);
    assert.equal(pollOverride({ OFFLOAD_POLL_US: '0' }), 0);
    assert.equal(pollOverride({ OFFLOAD_POLL_US: '25' }), 25);
    assert.throws(() => pollOverride({ OFFLOAD_POLL_US: 'fast' }), /OFFLOAD_POLL_US must be a number/);
  });

  it('a client says under OFFLOAD_DEBUG what its polling chose', () => {
    // A real client and proxy in one process, over 127.0.0.1; OFFLOAD_POLL_US=0 makes the choice
    // the same on any machine.
    const script = `
      import { Offload } from './src/index.js';
      import { startProxy } from './test/helpers/proxy.js';
      const proxy = await startProxy({ threads: 1 });
      const runtime = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
      await runtime.shutdown();
      await proxy.stop();
    `;
    const result = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: new URL('..', import.meta.url),
      encoding: 'utf8',
      env: { ...process.env, OFFLOAD_DEBUG: '1', OFFLOAD_POLL_US: '0', OFFLOAD_PROXIES: '' },
      timeout: 25_000,
    });
    assert.equal(result.status, 0, result.stderr);
    assert.match(
      result.stderr,
      /offload-ts debug: (client|proxy) polling: TCP: OFFLOAD_POLL_US=0: sleeps as soon as nothing is ready/,
    );
  });

  it("a client beside a busy process per core tries spinning and says what the trial found, or that it runs on its proxy's core", async () => {
    // Which verdict depends on where the scheduler puts the client and its proxy (another core:
    // spins pay; the same core: they cost), so either is right; a trial must have ended, or the
    // client must have seen its proxy on its own core (then it sleeps without a trial).
    const hog = await startCpuHog(30_000);
    const proxy = await startProxy({ threads: 1 });
    try {
      const stderr = await launchingClient(proxy, { launches: 600 });
      const polling = stderr.split('\n').filter((line) => line.includes('client polling: TCP'));
      assert.match(polling[0] ?? '', /sleeps: .* do not fit in the other/, polling.join('\n').slice(0, 1000));
      assert.ok(
        polling.some((line) =>
          /spins up to \d+ us for every frame expected: frames spun for came in \d+ us, slept for in \d+ us, though|; a spin brought frames no sooner \(\d+ us against \d+ us slept for\)|sleeps: this thread and its peer run on core \d+ for now, and .* do not fit in the other/.test(
            line,
          ),
        ),
        polling.join('\n').slice(0, 1000),
      );
    } finally {
      await proxy.stop();
      await hog.stop();
    }
  });
});
