/**
 * Peers on one host that share their only core do not spin for each other
 * (src/transport/co-location.ts): the pieces fed hostile text and numbers (a /proc status line, a
 * socket's address, the process a peer tells in its hello), the policy in that mode, the hello
 * on the wire, and real processes pinned with taskset: a client and its proxy on one core say
 * they sleep, on two cores they do not.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { after, before, describe, it } from 'node:test';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import { isLoopbackPeer, isVisibleProcess, lastCpu, onlyCpu, thisProcess } from '../src/transport/co-location.js';
import { toldProcess } from '../src/transport/process-id.js';
import { PollPolicy } from '../src/transport/poll-policy.js';
import { launchingClient } from './helpers/launching-client.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';
import { RawClient } from './helpers/raw-client.js';

const SHARED = /sleeps: this thread and its peer may run on core (\d+) only/;
/** Either way of sharing a core. */
const SHARING = /sleeps: this thread and its peer (may run on core \d+ only|run on core \d+ for now)/;

describe('co-location: the pieces, fed anything', { timeout: 30_000 }, () => {
  it("reads the one CPU of a status text's Cpus_allowed_list, and nothing from anything else", () => {
    const status = (list: string) => `Name:\tnode\nCpus_allowed:\t3\nCpus_allowed_list:\t${list}\nMems_allowed:\t1\n`;
    assert.equal(onlyCpu(status('0')), 0);
    assert.equal(onlyCpu(status('13')), 13);
    assert.equal(onlyCpu(status('5-5')), 5);
    for (const list of [
      '0-1',
      '0,2',
      '1-0',
      '',
      ' ',
      '-1',
      'x',
      '0-',
      '99999999999999999999',
      '0\u0000',
      '0'.repeat(20_000),
    ])
      assert.equal(onlyCpu(status(list)), undefined, JSON.stringify(list.slice(0, 40)));
    assert.equal(onlyCpu('Name:\tnode\n'), undefined);
    assert.equal(onlyCpu(''), undefined);
    // A line far past what any status file holds is not searched.
    assert.equal(onlyCpu(`${'x'.repeat(70_000)}\nCpus_allowed_list:\t0\n`), undefined);
  });

  it("takes a socket's peer as on this host only for loopback addresses", () => {
    for (const address of ['127.0.0.1', '127.8.9.10', '::1', '::ffff:127.0.0.1', '0:0:0:0:0:0:0:1'])
      assert.equal(isLoopbackPeer(address), true, address);
    for (const address of [
      undefined,
      '',
      '10.0.0.1',
      '::ffff:10.0.0.1',
      '192.168.1.2',
      'fe80::1',
      '::',
      '1127.0.0.1',
      'localhost',
    ])
      assert.equal(isLoopbackPeer(address), false, String(address));
  });

  it('takes a told process only as plausible integers, and counts it only when it names a live process it can see', () => {
    const self = thisProcess();
    assert.ok(self, 'Linux: this process can be read from /proc');
    const stat = readFileSync('/proc/self/stat', 'latin1');
    assert.equal(self.pid, process.pid);
    assert.equal(self.started, Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]));
    assert.equal(isVisibleProcess(self), true);
    assert.equal(
      isVisibleProcess({ pid: self.pid, started: self.started + 1 }),
      false,
      'a pid reused, or another namespace',
    );
    assert.equal(isVisibleProcess({ pid: 4_194_303, started: 0 }), false, 'no such process');
    for (const [pid, started] of [
      [0, 1],
      [-1, 1],
      [1.5, 1],
      [2 ** 53, 1],
      [4_194_305, 1],
      [NaN, 1],
      ['1', 1],
      [1, -1],
      [1, 0.5],
      [1, Infinity],
      [1, '7'],
      [1, null],
      [{}, []],
    ] as const) {
      assert.equal(toldProcess(pid, started), undefined, JSON.stringify([pid, started]));
      assert.equal(isVisibleProcess({ pid, started } as never), false, JSON.stringify([pid, started]));
    }
    assert.deepEqual(toldProcess(1, 0), { pid: 1, started: 0 });
  });

  it('reads the CPU a /proc stat text says its thread ran on last, whatever its command name holds', () => {
    // Fields 3 to 38 (state, ppid, ..., exit signal), then 39 (the CPU), then five more.
    const stat = (name: string, cpu: string) =>
      `42 (${name}) S ${Array.from({ length: 35 }, (_, i) => i + 4).join(' ')} ${cpu} 0 0 0 0 0\n`;
    assert.equal(lastCpu(stat('node', '1')), 1);
    assert.equal(lastCpu(stat('a) b ) c', '7')), 7);
    for (const cpu of ['-1', 'x', '1.5', '', '99999999999999999999'])
      assert.equal(lastCpu(stat('node', cpu)), undefined, JSON.stringify(cpu));
    assert.equal(lastCpu('42 node S 1'), undefined);
    assert.equal(lastCpu(''), undefined);
    const self = readFileSync('/proc/thread-self/stat', 'latin1');
    assert.ok(lastCpu(self)! < availableParallelism() + 64, 'this thread ran on a CPU of this machine');
  });

  it('the policy sleeps while pinned to the core its peers are pinned to, says so once, learns nothing meanwhile; OFFLOAD_POLL_US still overrides', () => {
    const policy = new PollPolicy({ cores: 2 });
    policy.observeLoad(0);
    assert.equal(policy.window(), 50);
    policy.arrived(10);
    policy.observeSharedCore({ core: 0, pinned: true });
    assert.equal(policy.mode, 'shared-core');
    assert.match(policy.changed() ?? '', /sleeps: this thread and its peer may run on core 0 only/);
    for (let i = 0; i < 1000; i++) {
      assert.equal(policy.window(), 0);
      // Frames slept for that come late, and would back it off or teach it a dear wake-up.
      policy.arrived(5000);
    }
    assert.equal(policy.changed(), undefined, 'said once');
    policy.observeSharedCore(undefined);
    assert.equal(policy.mode, 'spin', 'nothing learnt while sleeping for the shared core');
    assert.equal(policy.window(), 50);
    const pinned = new PollPolicy({ cores: 1, overrideUs: 25 });
    pinned.observeSharedCore({ core: 0, pinned: true });
    assert.equal(pinned.window(), 25);
    assert.equal(pinned.mode, 'override');
  });

  it('where the peer ran last on this core, the policy sleeps on a crowded machine only, and tries again once they are apart', () => {
    const forNow = { core: 1, pinned: false };
    // A core to spare: the scheduler wakes the peer on the idle one, and spins pay.
    const spare = new PollPolicy({ cores: 2 });
    spare.observeLoad(0);
    spare.observeSharedCore(forNow);
    assert.equal(spare.mode, 'spin');
    assert.equal(spare.window(), 50);
    // Crowded: sleeps while they share the core, then trials again.
    const crowded = new PollPolicy({ cores: 2, random: () => 0.25 });
    crowded.observeLoad(3);
    crowded.observeSharedCore(forNow);
    assert.equal(crowded.mode, 'shared-core');
    assert.match(
      crowded.changed() ?? '',
      /sleeps: this thread and its peer run on core 1 for now, and 3 runnable threads besides this one do not fit in the other 1 of 2 cores/,
    );
    for (let i = 0; i < 100; i++) {
      assert.equal(crowded.window(), 0);
      crowded.arrived(3000);
    }
    crowded.observeSharedCore(undefined);
    const trial = Array.from({ length: 8 }, () => {
      const window = crowded.window();
      crowded.arrived(window > 0 ? 20 : 300);
      return window;
    });
    assert.ok(trial.some((window) => window > 0) && trial.some((window) => window === 0), String(trial));
    // An MPI job's ranks counted exactly keep their own rule: they sleep on too few cores anyway.
    const ranks = new PollPolicy({ cores: 2 });
    ranks.knowOthers(3);
    ranks.observeSharedCore(forNow);
    assert.equal(ranks.mode, 'crowded');
  });
});

describe('co-location: the hello on the wire', { timeout: 60_000 }, () => {
  let proxy: ProxyProcess;
  before(async () => {
    proxy = await startProxy({ threads: 1 });
  });
  after(() => proxy.stop());

  it('a proxy tells a client on this host its process, and takes a client process it cannot check as nothing', async () => {
    const proxyPid = proxy.child.pid!;
    for (const told of [
      {},
      { pid: 1, started: 12345 },
      { pid: 2 ** 40, started: 1 },
      { pid: process.pid, started: 0 },
    ]) {
      const raw = await RawClient.open(proxy.address);
      try {
        raw.send({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: proxy.token, ...told });
        const welcome = await raw.reply(1);
        assert.equal(welcome.error, undefined, JSON.stringify(welcome).slice(0, 300));
        assert.equal(welcome.pid, proxyPid, 'its own pid, to a client on this host');
        assert.equal(typeof welcome.started, 'number');
      } finally {
        raw.close();
      }
    }
  });

  it('a hello whose pid or start time is not a non-negative integer is refused, naming the field', async () => {
    for (const [field, value] of [
      ['pid', -1],
      ['pid', 'me'],
      ['started', 1.5],
      ['started', { a: 1 }],
    ] as const) {
      const raw = await RawClient.open(proxy.address);
      try {
        raw.send({
          op: 'hello',
          id: 1,
          version: PROTOCOL_VERSION,
          token: proxy.token,
          pid: 7,
          started: 7,
          [field]: value,
        });
        const error = await raw.error(1);
        assert.equal(error?.code, 'PROTOCOL');
        assert.match(error.message, new RegExp(`field '${field}' must be a non-negative integer`));
      } finally {
        raw.close();
      }
    }
  });
});

/**
 * A client pinned to `cpus` launching on `proxy` for 400 ms under OFFLOAD_DEBUG (the policy
 * samples where it runs every 50 ms); its stderr.
 */
const pinnedClient = (proxy: ProxyProcess, cpus: string) => launchingClient(proxy, { cpus, ms: 400 });

const pollingLines = (text: string, who: string) =>
  text.split('\n').filter((line) => line.includes(`${who} polling: TCP`));

describe('co-location: a client and its proxy pinned with taskset', { timeout: 90_000 }, () => {
  before(() => {
    const taskset = spawnSync('taskset', ['-c', '0', 'true']);
    assert.equal(taskset.status, 0, "util-linux's taskset runs here (Linux)");
  });

  it('on one core both say they sleep for it, and stay so', async () => {
    const proxy = await startProxy({
      threads: 1,
      launcher: ['env', 'OFFLOAD_DEBUG=1', 'OFFLOAD_POLL_US=', 'taskset', '-c', '0'],
    });
    try {
      const client = pollingLines(await pinnedClient(proxy, '0'), 'client');
      assert.match(client.at(-1) ?? '', SHARED, client.join('\n').slice(0, 1500));
      assert.equal(SHARED.exec(client.at(-1)!)![1], '0');
      const proxyLines = pollingLines(proxy.output(), 'proxy');
      assert.match(proxyLines.at(-1) ?? '', SHARED, proxyLines.join('\n').slice(0, 1500));
    } finally {
      await proxy.stop();
    }
  });

  it(
    'on two cores neither says it shares a core',
    { skip: availableParallelism() < 2 && 'one core: nothing to place apart' },
    async () => {
      const proxy = await startProxy({
        threads: 1,
        launcher: ['env', 'OFFLOAD_DEBUG=1', 'OFFLOAD_POLL_US=', 'taskset', '-c', '0'],
      });
      try {
        const client = pollingLines(await pinnedClient(proxy, '1'), 'client');
        assert.ok(client.length > 0, 'the client said what it chose');
        assert.ok(!client.some((line) => SHARING.test(line)), client.join('\n').slice(0, 1500));
        assert.ok(!pollingLines(proxy.output(), 'proxy').some((line) => SHARING.test(line)));
      } finally {
        await proxy.stop();
      }
    },
  );
});
