/**
 * Keeps every CPU busy from other processes, so that the threads under test are preempted at
 * arbitrary points (where races show). Each hog ends itself after `maxMs` whatever happens, so
 * none outlives the test that started it, even if that test's process is killed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';

export interface CpuHog {
  stop(): Promise<void>;
}

export async function startCpuHog(maxMs = 120_000): Promise<CpuHog> {
  const script = `const end = Date.now() + ${maxMs}; process.stdout.write('spinning\\n'); while (Date.now() < end) {}`;
  const hogs: ChildProcess[] = Array.from({ length: availableParallelism() }, () =>
    spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] }),
  );
  // Started when each one spins: the test then runs on busy CPUs from its first launch.
  await Promise.all(hogs.map((hog) => new Promise((resolve) => hog.stdout!.once('data', resolve))));
  return {
    async stop() {
      await Promise.all(
        hogs.map(
          (hog) =>
            new Promise<void>((resolve) => {
              if (hog.exitCode !== null || hog.signalCode !== null) return resolve();
              hog.once('exit', () => resolve());
              hog.kill('SIGKILL');
            }),
        ),
      );
    },
  };
}
