/**
 * MPI ping-pong from Node, through the project's MPI addon (native/mpi) and nothing else: rank 0
 * sends 16 bytes to rank 1, which sends them back. Two ways of waiting for the answer: polling
 * in a tight loop (the addon's floor) and polling once per turn of the event loop (the way the
 * MPI transport makes progress). Prints one JSON line from rank 0: medians of 7 repetitions of
 * 1000 round trips, in microseconds. Run as `mpirun -np 2 node --import tsx bench/mpi-node-pingpong.ts`.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import { loadMpiAddon } from '../src/transport/mpi/addon.js';

const ROUNDS = 1000;
const REPS = 7;
const TAG = 1;

const mpi = loadMpiAddon();
if (!mpi) throw new Error('the MPI addon is not built (npm run build:mpi)');
const { rank } = mpi.init();
const peer = 1 - rank;
const message = new Uint8Array(16);
const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!;

/** Waits for one message from the peer: polls in a loop, or once per event-loop turn. */
async function receive(spin: boolean): Promise<void> {
  for (;;) {
    mpi!.completed();
    if (mpi!.probe()) {
      mpi!.receive();
      return;
    }
    if (!spin) await nextTurn();
  }
}

async function rounds(spin: boolean): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < ROUNDS; i++) {
    if (rank === 0) {
      mpi!.send(peer, TAG, message);
      await receive(spin);
    } else {
      await receive(spin);
      mpi!.send(peer, TAG, message);
    }
  }
  return ((performance.now() - started) / ROUNDS) * 1000;
}

const figures: Record<string, number> = {};
for (const [name, spin] of [
  ['spin_rtt_us', true],
  ['event_loop_rtt_us', false],
] as const) {
  await rounds(spin); // warm-up
  const samples: number[] = [];
  for (let rep = 0; rep < REPS; rep++) samples.push(await rounds(spin));
  figures[name] = median(samples);
}
if (rank === 0) console.log(JSON.stringify(figures));
mpi.finalize(false);
