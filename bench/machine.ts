/** The machine a bench run measured, printed above its figures. */
import { availableParallelism, cpus, release, totalmem, type } from 'node:os';
import { runtimeSource } from './offload.js';

/** Environment variables that change what the host suite measures. */
const SETTINGS = ['OFFLOAD_HOST_THREADS', 'OFFLOAD_HOST_SPIN_US'] as const;

export interface Machine {
  cpu: string;
  cores: number;
  availableParallelism: number;
  memoryGiB: number;
  os: string;
  node: string;
  /** Which runtime was measured (bench/offload.ts): the dist/ build, or src/ through tsx. */
  runtime: string;
  /** Each of SETTINGS, or null where unset. */
  env: Record<(typeof SETTINGS)[number], string | null>;
}

export function describeMachine(): Machine {
  const cores = cpus();
  return {
    cpu: cores[0]?.model.trim() || 'unknown',
    cores: cores.length,
    availableParallelism: availableParallelism(),
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    os: `${type()} ${release()} ${process.arch}`,
    node: process.version,
    runtime: runtimeSource(),
    env: Object.fromEntries(SETTINGS.map((name) => [name, process.env[name] ?? null])) as Machine['env'],
  };
}
