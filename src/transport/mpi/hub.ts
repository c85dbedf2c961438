/**
 * The MPI hub: a rank's one view of its job, which sends and receives for every channel
 * (transport.ts) and speaks the hub's control protocol. The MPI transport carries the same
 * frames as TCP between the ranks of one `mpirun` job, through a small native addon (addon.ts). Every rank has one hub; a
 * connection is a (peer rank, channel) pair whose channel is the MPI tag of its frames, and
 * tag 0 carries the hub's own control messages:
 *   role     each rank tells every other rank whether it is a proxy or an application, and its
 *            process (pid and host: a rank taken as gone is ended at finalize, see endGoneRanks)
 *   connect  an application opens a channel to a proxy (the proxy gets a Transport for it)
 *   close    either side closed a channel
 *   bye      an application rank is done (and names the ranks it took as gone); a proxy exits
 *            once every application rank said it
 *   alive    every rank tells every other one it lives, once a second: a rank silent past the
 *            peer timeout (killed, under `mpirun --enable-recovery`, which keeps the job going;
 *            or stopped) is taken as gone: its channels close with DEVICE_LOST, and an
 *            application rank gone counts as having said bye
 * Messages between two ranks are not overtaken (all are received through one wildcard probe),
 * so a channel's frames arrive in order; a payload whose frame's sink gave a view (a write's
 * chunk, into device memory) is received straight into it. Progress is polled from the event
 * loop at every setImmediate while traffic is recent (while the rank has sends in flight, or a
 * channel expects a frame soon, a turn keeps polling for up to 300 us, BURST_US; nothing blocks
 * longer; without sends in flight only while the polling policy would spin, poll-policy.ts). A
 * channel expects one when it awaits the reply to its one request, or has answered every request
 * of its client (Transport.expectSoon; for the policy's window): the frame is seen as it
 * arrives, not at the next turn. When the rank goes quiet, the addon's progress thread watches
 * MPI instead and wakes the event loop when a message arrives or a send completes
 * (OFFLOAD_MPI_PROGRESS=thread, the default): a request after a pause is seen at the thread's
 * next look (at most 100 us later) and a wake of the event loop, not at the next turn of a 1 ms
 * timer (a launch after a 10 ms pause: 0.3-0.65 ms, against 1.7-4.2 ms with the timer, on a
 * 2-vCPU VM). OFFLOAD_MPI_PROGRESS=poll keeps the timer. Bulk sends of bytes sent twice before
 * go from huge pages (OFFLOAD_MPI_HUGE_PAGES; offload_mpi.c).
 */
import { readFileSync } from 'node:fs';
import { availableParallelism, cpus, hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { asOffloadError, errors, OffloadError, quoted } from '../../errors.js';
import { encodeFrame, FrameDecoder } from '../frame.js';
import { DEFAULT_CLIENT_TIMEOUT_MS, heartbeatInterval, peerTimeoutFromEnv } from '../heartbeat.js';
import { PollPolicy } from '../poll-policy.js';
import { pollOverride, reportPolicy } from '../poll-window.js';
import type { Transport } from '../transport.js';
import { loadMpiAddon, mpiUnavailable, type MpiAddon } from './addon.js';
import { MpiTransport } from './transport.js';

export type MpiRole = 'proxy' | 'app';

const CONTROL_TAG = 0;
/** Poll at every turn of the event loop for this long after the last traffic, then every ms. */
const BUSY_MS = 2;
/** How long one turn keeps polling while sends are in flight, in microseconds. */
const BURST_US = 300;
const ROLES_TIMEOUT_MS = 30_000;
/** What completed when nothing was in flight: no call to ask (a spin makes many polls). */
const NOTHING_SENT: readonly number[] = [];
/** Sends at least this long are bulk data: their arrays' pages are worth collapsing (see `post`). */
const BULK_BYTES = 256 * 1024;

/** OFFLOAD_MPI_HUGE_PAGES, checked: whether bulk sends collapse their arrays into huge pages (default on). */
export function hugePagesFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  const text = env.OFFLOAD_MPI_HUGE_PAGES;
  if (text === undefined || text === '' || text === 'on') return true;
  if (text === 'off') return false;
  throw errors.invalidArgument(
    `OFFLOAD_MPI_HUGE_PAGES must be 'on' or 'off', not ${quoted(text)} (off: leave the pages of arrays sent over MPI as they are)`,
  );
}

/** How a quiet rank learns of MPI traffic: the addon's progress thread, or a 1 ms timer on the event loop. */
export type MpiProgress = 'thread' | 'poll';

/** OFFLOAD_MPI_PROGRESS, checked: 'thread' (default) or 'poll'. */
export function progressFromEnv(env: NodeJS.ProcessEnv = process.env): MpiProgress {
  const text = env.OFFLOAD_MPI_PROGRESS;
  if (text === undefined || text === '' || text === 'thread') return 'thread';
  if (text === 'poll') return 'poll';
  throw errors.invalidArgument(
    `OFFLOAD_MPI_PROGRESS must be 'thread' or 'poll', not ${quoted(text)} (poll: a quiet rank looks for MPI messages every millisecond from the event loop, without the addon's progress thread)`,
  );
}

/** One per process: this rank's view of the job. */
export class MpiHub {
  private static instance: MpiHub | undefined;
  readonly rank: number;
  readonly size: number;
  /** How this rank learns of traffic while quiet. */
  readonly progress: MpiProgress;
  private readonly tagLimit: number;
  private readonly roles = new Map<number, MpiRole>();
  private readonly channels = new Map<string, MpiTransport>();
  private readonly sends = new Map<number, { transport: MpiTransport | undefined; rank: number; bytes: number }>();
  private readonly byes = new Set<number>();
  /** When each other rank was last heard from (any message), and the ranks taken as gone. */
  private readonly heardAt = new Map<number, number>();
  private readonly gone = new Set<number>();
  private readonly liveness: NodeJS.Timeout;
  private nextChannel = 1;
  private timer: NodeJS.Immediate | NodeJS.Timeout | undefined;
  /** Whether the progress thread is armed and watches MPI for this hub (which then schedules no timer), and whether it holds the process. */
  private waiting = false;
  private waitingHolds = false;
  private lastTraffic = 0;
  /** Until when (performance.now()) a turn keeps polling for a frame a channel expects (expectSoon). */
  private expectUntil = 0;
  /** Messages that came while expected, within the window (diagnostics). */
  private expectedArrivals = 0;
  /**
   * How long it may: TCP's policy (OFFLOAD_POLL_US overrides it), but its crowd is the job's
   * other ranks on this host, not the machine's load. A quiet rank sees a message only at its
   * progress thread's next look and a wake of its event loop: on a 2-vCPU VM a launch round trip
   * through both ranks' sleeps took 600-900 us, against 20 us spinning idle and 65-73 us spinning
   * beside a busy process per core (bench/README.md). So a rank spins while the job's ranks here
   * fit in the machine's cores (mpirun binds each to one), whatever else runs: the scheduler
   * shares a core between a spinning rank and another program, and the spin takes nothing from
   * the peer that must answer. Oversubscribed ranks sleep, as Open MPI's yield then. */
  private readonly polling = new PollPolicy({
    cores: cpus().length || availableParallelism(),
    overrideUs: pollOverride(),
    others: ['other rank of this job on this host', 'other ranks of this job on this host'],
  });
  /** When a channel last expected a frame (performance.now()), until one comes, and whether it sleeps for it. */
  private expectedAt: number | undefined;
  private sleepsForFrame = false;
  private failure: OffloadError | undefined;
  private finalized = false;
  /** Each other rank's process, as its `role` message said: a rank taken as gone on this host is ended at finalize. */
  private readonly processes = new Map<number, { pid: number; host: string }>();
  private readonly host = hostname();
  private roleWaiters: (() => void)[] = [];
  private onAccept: ((transport: Transport) => void) | undefined;
  private onAllAppsGone: (() => void) | undefined;

  private constructor(
    private readonly mpi: MpiAddon,
    readonly role: MpiRole,
    private readonly hugePages: boolean,
    progress: MpiProgress,
  ) {
    const { rank, size, tagUpperBound, progressThread } = mpi.init();
    // MPI_THREAD_SERIALIZED is what the thread needs; an MPI that offers less gets the timer.
    this.progress = progress === 'thread' && progressThread ? 'thread' : 'poll';
    if (this.progress === 'thread') mpi.startProgress(() => this.woken());
    this.rank = rank;
    this.size = size;
    this.countRanksHere();
    this.tagLimit = tagUpperBound;
    this.roles.set(rank, role);
    for (let other = 0; other < size; other++) {
      if (other === rank) continue;
      this.heardAt.set(other, Date.now());
      this.control(other, { op: 'role', role, pid: process.pid, host: this.host });
    }
    // A proxy waits longer for an application rank (whose event loop may be busy with its own
    // work) than anyone waits for a proxy rank.
    const clientTimeoutMs = peerTimeoutFromEnv(process.env, DEFAULT_CLIENT_TIMEOUT_MS);
    const proxyTimeoutMs = peerTimeoutFromEnv();
    this.liveness = setInterval(
      () => this.checkLiveness(clientTimeoutMs, proxyTimeoutMs),
      heartbeatInterval(Math.min(clientTimeoutMs, proxyTimeoutMs)),
    );
    this.liveness.unref();
    process.once('exit', () => this.finalize());
    this.schedule();
  }

  /** Says `alive` to every rank still in the job, and takes those silent past their timeout as gone. */
  private checkLiveness(clientTimeoutMs: number, proxyTimeoutMs: number): void {
    if (!this.active()) return;
    const now = Date.now();
    for (const [rank, heard] of this.heardAt) {
      if (this.gone.has(rank) || this.byes.has(rank)) continue;
      const timeoutMs = this.role === 'proxy' && this.roles.get(rank) !== 'proxy' ? clientTimeoutMs : proxyTimeoutMs;
      if (now - heard < timeoutMs) {
        this.control(rank, { op: 'alive' });
        continue;
      }
      this.takeAsGone(rank, `mpi:${rank} sent nothing for ${timeoutMs} ms (OFFLOAD_PEER_TIMEOUT); taken as gone`);
    }
  }

  /** A rank that died or hangs: its channels close with DEVICE_LOST, and an application rank counts as having said bye. */
  private takeAsGone(rank: number, why: string): void {
    if (this.gone.has(rank)) return;
    this.gone.add(rank);
    const reason = errors.deviceLost(why);
    for (const transport of [...this.channels.values()])
      if (transport.rank === rank) transport.closeQuietly(reason, false);
    // Sends to it may never complete; they no longer hold this process.
    for (const [id, send] of this.sends) if (send.rank === rank) this.sends.delete(id);
    if (this.roles.get(rank) !== 'proxy') this.byes.add(rank);
    this.checkAllGone();
  }

  /** The hub of this process, if it has one. */
  static current(): MpiHub | undefined {
    return MpiHub.instance;
  }

  /** The hub of this process; the first call says which role it plays. */
  static get(role: MpiRole): MpiHub {
    if (MpiHub.instance) {
      if (MpiHub.instance.role !== role)
        throw errors.unsupported(
          `this MPI rank is already a${MpiHub.instance.role === 'app' ? 'n application' : ' proxy'}; it cannot also be a${role === 'app' ? 'n application' : ' proxy'}`,
        );
      return MpiHub.instance;
    }
    const hugePages = hugePagesFromEnv();
    const progress = progressFromEnv();
    const mpi = loadMpiAddon();
    if (!mpi) throw errors.unsupported(mpiUnavailable()!);
    MpiHub.instance = new MpiHub(mpi, role, hugePages, progress);
    return MpiHub.instance;
  }

  /** The proxy ranks of the job, once every rank has said what it is. */
  async proxies(): Promise<number[]> {
    const deadline = Date.now() + ROLES_TIMEOUT_MS;
    while (this.roles.size < this.size) {
      if (this.failure) throw this.failure;
      if (Date.now() > deadline) {
        const missing = Array.from({ length: this.size }, (_, r) => r).filter((r) => !this.roles.has(r));
        throw errors.timeout(
          `MPI ranks ${missing.join(', ')} did not say whether they are proxies within ${ROLES_TIMEOUT_MS / 1000} s`,
        );
      }
      await new Promise<void>((resolve) => {
        this.roleWaiters.push(resolve);
        setTimeout(resolve, 100).unref();
      });
    }
    return [...this.roles]
      .filter(([, role]) => role === 'proxy')
      .map(([rank]) => rank)
      .sort((a, b) => a - b);
  }

  /** Opens a channel to proxy `rank`. */
  connect(rank: number): Transport {
    if (this.failure) throw this.failure;
    if (this.gone.has(rank))
      throw errors.deviceLost(`mpi:${rank} is gone (it sent nothing for longer than OFFLOAD_PEER_TIMEOUT)`);
    if (!Number.isInteger(rank) || rank < 0 || rank >= this.size || rank === this.rank) {
      throw errors.invalidArgument(
        `mpi:${rank} is not another rank of this job (ranks 0 to ${this.size - 1}, this is ${this.rank})`,
      );
    }
    if (this.nextChannel >= this.tagLimit) throw errors.unsupported(`out of MPI tags (${this.tagLimit}) for channels`);
    const transport = new MpiTransport(this, rank, this.nextChannel++);
    this.channels.set(`${rank}/${transport.channel}`, transport);
    this.control(rank, { op: 'connect', channel: transport.channel });
    this.schedule();
    return transport;
  }

  /** As a proxy: `accept` gets a Transport per application channel; `allGone` runs when every application rank said bye. */
  serve(accept: (transport: Transport) => void, allGone: () => void): void {
    this.onAccept = accept;
    this.onAllAppsGone = allGone;
    this.checkAllGone();
  }

  /** @internal */
  post(transport: MpiTransport, bytes: Uint8Array): void {
    if (this.failure) return transport.closeQuietly(this.failure, false);
    try {
      // The receiver's single copy pins the sent pages one by one; bytes sent again and again
      // go about twice as fast from huge pages (offload_mpi.c).
      if (this.hugePages && bytes.length >= BULK_BYTES) this.mpi.adviseHugePages(bytes);
      const id = this.mpi.isend(transport.rank, transport.channel, bytes);
      this.sends.set(id, { transport, rank: transport.rank, bytes: bytes.length });
      transport.inFlight += bytes.length;
      this.lastTraffic = performance.now();
      this.schedule();
    } catch (error) {
      this.fail(error);
    }
  }

  /**
   * @internal A channel expects its peer's next frame soon (the reply to a request, a client's
   * next request): the next turn polls MPI until a message comes, for up to the window. One poll
   * per turn of the event loop saw a reply a turn late: 36-44 us a launch round trip, against
   * 22 us for a Node ping-pong polling once a turn (bench/README.md).
   */
  expectSoon(): void {
    if (!this.active()) return;
    const now = performance.now();
    const windowUs = this.polling.window();
    reportPolicy('MPI', this.polling);
    this.expectedAt = now;
    this.sleepsForFrame = windowUs === 0;
    if (windowUs === 0) return;
    // Traffic now: the hub polls from the event loop's turns, not through the progress thread.
    this.lastTraffic = now;
    this.expectUntil = now + windowUs / 1000;
    this.schedule();
  }

  /**
   * Whether the event loop polls at every turn after traffic (for BUSY_MS): while sends are in
   * flight, and otherwise only while the polling policy would spin (OFFLOAD_POLL_US set keeps it
   * as it was); a crowded machine or a peer that answers late gets the progress thread at once.
   */
  private pollsWhileBusy(): boolean {
    if (this.sends.size > 0 || this.polling.overrideUs !== undefined) return true;
    // A frame the policy gave no window (a sample of what a sleep costs) is slept for.
    return this.polling.mode === 'spin' && !this.sleepsForFrame;
  }

  /** Whether any channel keeps the process alive (Transport.hold). */
  private channelHolds(): boolean {
    for (const transport of this.channels.values()) if (transport.held) return true;
    return false;
  }

  /** @internal A channel took hold of the process or let go: the timer or the armed thread follows. */
  holdChanged(): void {
    if (this.active()) this.schedule();
  }

  /** @internal */
  forget(transport: MpiTransport, tellPeer: boolean): void {
    this.channels.delete(`${transport.rank}/${transport.channel}`);
    if (tellPeer && !this.failure && !this.finalized)
      this.control(transport.rank, { op: 'close', channel: transport.channel });
  }

  private control(rank: number, meta: Record<string, unknown>): void {
    try {
      const id = this.mpi.isend(rank, CONTROL_TAG, encodeFrame(meta));
      this.sends.set(id, { transport: undefined, rank, bytes: 0 });
    } catch (error) {
      this.fail(error);
    }
  }

  /**
   * Keeps polling while anything could still arrive or leave: at every turn of the event loop
   * while traffic is recent; when quiet, by arming the progress thread (or, without it, every
   * millisecond). The timer or the armed thread holds the process only while it should.
   */
  private schedule(): void {
    if (this.finalized) return;
    // A proxy lives as long as it serves; an application only while a channel holds it (one
    // with requests pending: Transport.hold), sends are in flight, or it still waits to hear
    // what the other ranks are.
    const holdsProcess =
      this.role === 'proxy' || this.sends.size > 0 || this.roles.size < this.size || this.channelHolds();
    const busy = performance.now() - this.lastTraffic < BUSY_MS && this.pollsWhileBusy();
    if (this.progress === 'thread' && !busy && !this.timer) {
      if (!this.waiting || this.waitingHolds !== holdsProcess) {
        this.waiting = true;
        this.waitingHolds = holdsProcess;
        this.mpi.awaitProgress(holdsProcess);
      }
      return;
    }
    if (this.waiting) {
      // Traffic again (a send): the event loop polls by itself, at once.
      this.waiting = false;
      this.mpi.disarmProgress();
    }
    if (!this.timer) {
      const tick = () => {
        this.timer = undefined;
        this.pollBurst();
        if (this.active()) this.schedule();
      };
      this.timer = busy ? setImmediate(tick) : setTimeout(tick, 1);
    }
    if (holdsProcess) this.timer.ref();
    else this.timer.unref();
  }

  /** The progress thread saw a message or a completed send while this hub was quiet. */
  private woken(): void {
    // A wake that was on its way when the hub began polling by itself again finds nothing to do.
    if (!this.waiting || !this.active()) return;
    this.waiting = false;
    this.lastTraffic = performance.now();
    try {
      // This wake may be one the thread sent before the hub polled by itself and armed it
      // again: then the thread is armed still, and must not be while the hub polls.
      this.mpi.disarmProgress();
      this.pollBurst();
      if (this.active()) this.schedule();
    } catch (error) {
      this.fail(error);
    }
  }

  /** How many messages came while a channel expected one, within the window (diagnostics). */
  get arrivalsExpected(): number {
    return this.expectedArrivals;
  }

  /** How often the progress thread has woken this rank's event loop (diagnostics). */
  get progressWakes(): number {
    return this.progress === 'thread' ? this.mpi.progressWakes() : 0;
  }

  private active(): boolean {
    return !this.finalized && !this.failure;
  }

  /**
   * Polls once, then again and again for up to BURST_US while sends are in flight or a frame is
   * expected (expectSoon: until a message comes or the window ends; a longer window goes on in
   * the next turns). MPI moves a large message (rendezvous) only while both ranks call into it:
   * one poll per event-loop turn made a 64 MiB write a chain of turns on both sides.
   */
  private pollBurst(): void {
    const started = performance.now();
    this.pollOnce();
    while (this.active()) {
      const now = performance.now();
      if ((now - started) * 1000 >= BURST_US || (this.sends.size === 0 && now >= this.expectUntil)) return;
      this.pollOnce();
    }
  }

  /** True if a send completed or a message arrived. */
  private pollOnce(): boolean {
    try {
      const sent = this.sends.size > 0 ? this.mpi.completed() : NOTHING_SENT;
      for (const id of sent) {
        const send = this.sends.get(id);
        this.sends.delete(id);
        send?.transport?.completed(send.bytes);
      }
      let received = false;
      // One message at a time, each handed on before the next is probed: a frame head decides
      // where its payload (the next message of its channel) is received to.
      for (let probe = this.mpi.probe(); probe && this.active(); probe = this.mpi.probe()) {
        const [source, tag, bytes] = probe;
        received = true;
        // What was expected came (or something else did, which the event loop handles first);
        // cleared before the message is handed on, whose handling may expect the next one.
        const now = performance.now();
        if (this.expectUntil > 0 && now < this.expectUntil) this.expectedArrivals++;
        this.expectUntil = 0;
        if (this.expectedAt !== undefined) {
          this.polling.arrived((now - this.expectedAt) * 1000);
          this.expectedAt = undefined;
          this.sleepsForFrame = false;
          reportPolicy('MPI', this.polling);
        }
        this.heardAt.set(source, Date.now());
        const channel = tag === CONTROL_TAG ? undefined : this.channels.get(`${source}/${tag}`);
        const into = channel?.directTarget(bytes);
        const data = this.mpi.receive(into);
        if (tag === CONTROL_TAG) this.onControl(source, data);
        else if (into) channel!.landed(bytes);
        else channel?.receive(data);
      }
      if (received) this.lastTraffic = performance.now();
      return sent.length > 0 || received;
    } catch (error) {
      this.fail(error);
      return false;
    }
  }

  private onControl(source: number, data: Uint8Array): void {
    let meta: Record<string, unknown>;
    try {
      const frames = new FrameDecoder().push(data);
      if (frames.length !== 1) throw errors.protocol('a control message must be one frame');
      meta = frames[0]!.meta;
    } catch {
      return; // not ours to answer: a malformed control message from a rank is dropped
    }
    switch (meta.op) {
      case 'role':
        if (meta.role === 'proxy' || meta.role === 'app') this.roles.set(source, meta.role);
        if (Number.isSafeInteger(meta.pid) && (meta.pid as number) > 1 && typeof meta.host === 'string')
          this.processes.set(source, { pid: meta.pid as number, host: meta.host });
        this.countRanksHere();
        for (const wake of this.roleWaiters.splice(0)) wake();
        this.checkAllGone();
        return;
      case 'connect': {
        if (!this.onAccept || typeof meta.channel !== 'number') return;
        const transport = new MpiTransport(this, source, meta.channel);
        this.channels.set(`${source}/${meta.channel}`, transport);
        this.onAccept(transport);
        return;
      }
      case 'close':
        this.channels
          .get(`${source}/${String(meta.channel)}`)
          ?.closeQuietly(errors.deviceLost(`mpi:${source} closed the connection`), false);
        return;
      case 'bye':
        // The ranks the application took as gone: this rank may not have noticed yet, and must
        // know before it finalizes (see finalize).
        if (Array.isArray(meta.gone))
          for (const rank of meta.gone.slice(0, this.size))
            if (Number.isInteger(rank) && rank >= 0 && rank < this.size && rank !== this.rank && rank !== source)
              this.takeAsGone(rank as number, `mpi:${rank as number} is gone (mpi:${source} took it as gone)`);
        this.byes.add(source);
        for (const transport of [...this.channels.values()]) {
          if (transport.rank === source) transport.closeQuietly(errors.deviceLost(`mpi:${source} left the job`), false);
        }
        this.checkAllGone();
        return;
    }
  }

  /** The polling policy's crowd: the other ranks on this host (a rank not heard from yet counts as one). */
  private countRanksHere(): void {
    let elsewhere = 0;
    for (const [rank, other] of this.processes) if (rank !== this.rank && other.host !== this.host) elsewhere++;
    this.polling.knowOthers(this.size - 1 - elsewhere);
  }

  private checkAllGone(): void {
    if (!this.onAllAppsGone || this.roles.size < this.size) return;
    const apps = [...this.roles].filter(([, role]) => role === 'app').map(([rank]) => rank);
    if (apps.every((rank) => this.byes.has(rank))) {
      const done = this.onAllAppsGone;
      this.onAllAppsGone = undefined;
      done();
    }
  }

  private fail(error: unknown): void {
    if (this.failure) return;
    this.failure = asOffloadError(error, 'MPI failed', { code: 'DEVICE_LOST' });
    if (this.waiting) {
      // Nothing polls a failed hub: the thread must not keep it alive or wake it.
      this.waiting = false;
      try {
        this.mpi.disarmProgress();
      } catch {
        // the failure is already recorded
      }
    }
    for (const transport of [...this.channels.values()]) transport.closeQuietly(this.failure, false);
  }

  /**
   * Leaves the job: an application tells every proxy it is done, and which ranks it took as gone
   * (blocking sends: nothing polls afterwards), then every rank finalizes. MPI_Finalize ends with
   * a fence over every rank of the job, which a dead rank can keep from ever completing; so once
   * a rank is gone, this rank finalizes without it. Runs at exit if nobody called it. Idempotent.
   */
  finalize(): void {
    if (this.finalized) return;
    this.finalized = true;
    this.waiting = false;
    clearInterval(this.liveness);
    if (this.timer) {
      clearTimeout(this.timer as NodeJS.Timeout);
      clearImmediate(this.timer as NodeJS.Immediate);
      this.timer = undefined;
    }
    try {
      if (this.role === 'app') {
        const bye = encodeFrame({ op: 'bye', gone: [...this.gone] });
        for (const [rank, role] of this.roles)
          if (role === 'proxy' && !this.gone.has(rank)) this.mpi.send(rank, CONTROL_TAG, bye);
      }
      this.mpi.completed();
      this.mpi.finalize(this.gone.size > 0);
    } catch {
      // The job is ending; a failure to say goodbye changes nothing for this rank.
    }
    this.endGoneRanks();
  }

  /**
   * mpirun ends when every rank's process has: a rank taken as gone that still runs (stopped,
   * or stuck) would hold the job for ever once the others have finalized. So each rank that
   * leaves kills the gone ranks on its own host, each first checked through /proc (Linux) to be
   * that rank of this job (its environment names the same job and rank), so a reused pid is
   * never hit. A gone rank on another host is left to mpirun (or to a rank there).
   */
  private endGoneRanks(): void {
    const job =
      process.env.OMPI_MCA_ess_base_jobid !== undefined
        ? `OMPI_MCA_ess_base_jobid=${process.env.OMPI_MCA_ess_base_jobid}`
        : process.env.PMIX_NAMESPACE !== undefined
          ? `PMIX_NAMESPACE=${process.env.PMIX_NAMESPACE}`
          : undefined;
    if (job === undefined) return;
    for (const rank of this.gone) {
      const gone = this.processes.get(rank);
      if (!gone || gone.host !== this.host || gone.pid === process.pid) continue;
      try {
        const env = readFileSync(`/proc/${gone.pid}/environ`, 'utf8').split('\0');
        const ranked = env.includes(`OMPI_COMM_WORLD_RANK=${rank}`) || env.includes(`PMIX_RANK=${rank}`);
        if (env.includes(job) && ranked) process.kill(gone.pid, 'SIGKILL');
      } catch {
        // Already ended, or not ours to read or signal: nothing holds the job here.
      }
    }
  }
}
