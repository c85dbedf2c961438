/**
 * An explicit-state model checker for shared-memory protocols: it runs the steps of several
 * threads (each step one access to shared memory) in every order they can be interleaved,
 * depth first, remembering the states it has seen so that each distinct state is expanded once.
 * After every step it asks the system for a broken invariant; in a state where no thread can
 * move it asks whether the system is stuck (work left that nothing will ever do: a lost wake-up).
 * A violation comes back with the schedule that leads to it, one line per step.
 */
import { createHash } from 'node:crypto';

/** A system under test: threads that take steps, with a state that can be saved and restored. */
export interface InterleavedSystem<Saved> {
  /** Threads that can take a step now (a thread blocked in a wait cannot). */
  runnable(): number[];
  /** Takes one step of `thread`; returns a line that says what it did, for traces. */
  step(thread: number): string;
  /** A broken invariant in the current state, or undefined. */
  violation(): string | undefined;
  /** Called when no thread can move: why that is wrong (work left undone), or undefined when all is done. */
  stuck(): string | undefined;
  /** Bytes and values that make up the whole state (shared memory and every thread's registers). */
  fingerprint(): (Uint8Array | string)[];
  save(): Saved;
  /** Makes `saved` the current state; `last` says it will not be restored again (it may be taken over rather than copied). */
  restore(saved: Saved, last: boolean): void;
}

export interface Exploration {
  /** Distinct states expanded. */
  states: number;
  /** Longest schedule explored. */
  deepest: number;
  /** The first violation found, with the schedule that reaches it. */
  violation?: { message: string; trace: string[] };
  /** True when the bound on states stopped the search before it was exhaustive. */
  bounded: boolean;
}

export interface ExploreOptions {
  /** Stop after this many distinct states (the exploration then says `bounded`). */
  maxStates?: number;
  /** Never go deeper than this many steps (schedules longer than it are cut, and `bounded` set). */
  maxDepth?: number;
}

function stateKey(parts: (Uint8Array | string)[]): string {
  const hash = createHash('sha1');
  for (const part of parts) hash.update(part);
  return hash.digest('base64');
}

/** Explores every interleaving of `system`'s threads from its current state. */
export function explore<Saved>(system: InterleavedSystem<Saved>, options: ExploreOptions = {}): Exploration {
  const maxStates = options.maxStates ?? 2_000_000;
  const maxDepth = options.maxDepth ?? 10_000;
  const seen = new Set<string>();
  const result: Exploration = { states: 0, deepest: 0, bounded: false };
  // Depth-first with an explicit stack: each frame is a saved state and the threads still to try from it.
  interface Frame {
    saved: Saved;
    pending: number[];
    label: string;
  }
  const trace: string[] = [];
  const stack: Frame[] = [];
  const enter = (label: string): boolean => {
    const key = stateKey(system.fingerprint());
    if (seen.has(key)) return false;
    seen.add(key);
    result.states++;
    if (result.states > maxStates) {
      result.bounded = true;
      return false;
    }
    const runnable = system.runnable();
    if (runnable.length === 0) {
      const stuck = system.stuck();
      if (stuck) result.violation = { message: stuck, trace: [...trace] };
      return false;
    }
    if (stack.length >= maxDepth) {
      result.bounded = true;
      return false;
    }
    stack.push({ saved: system.save(), pending: runnable, label });
    return true;
  };
  const initialViolation = system.violation();
  if (initialViolation) return { ...result, violation: { message: initialViolation, trace: [] } };
  enter('start');
  while (stack.length > 0 && !result.violation && !result.bounded) {
    const frame = stack[stack.length - 1]!;
    const thread = frame.pending.pop();
    if (thread === undefined) {
      stack.pop();
      trace.pop();
      continue;
    }
    system.restore(frame.saved, frame.pending.length === 0);
    const line = system.step(thread);
    trace.push(line);
    result.deepest = Math.max(result.deepest, trace.length);
    const broken = system.violation();
    if (broken) {
      result.violation = { message: broken, trace: [...trace] };
      break;
    }
    if (!enter(line)) trace.pop();
  }
  return result;
}

/** A violation as text: the message, then the numbered schedule that reaches it. */
export function describeViolation(found: Exploration['violation']): string {
  if (!found) return 'no violation';
  return `${found.message}\nschedule (${found.trace.length} steps):\n${found.trace.map((line, i) => `  ${String(i + 1).padStart(3)}. ${line}`).join('\n')}`;
}
