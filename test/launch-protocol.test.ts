/**
 * The host device's launch protocol (src/plugins/host/launch-protocol.ts), model-checked: the
 * production state machines of launch-host-side.ts and launch-worker-side.ts (main thread and 2-3
 * workers, each step one access to shared memory) run in every order they can interleave, on a
 * small ring, and the invariants are checked after every step (each team of each launch runs
 * exactly once, with that launch's payload; a launch completes once, after its last team; nothing
 * waits for a wake-up that never comes). Each exploration is exhaustive over its scenario: it
 * visits every reachable state.
 *
 * The same checker, run on the first protocol (test/fixtures/launch-protocol-v1.ts), finds the
 * two faults that made the host device run a team twice under load and hang in CI.
 */
import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { describeViolation, explore, type Exploration } from './helpers/interleavings.js';
import { LaunchModel, type Protocol, type Scenario } from './helpers/launch-model.js';
import { HostSideV1, PUBLICATION_V1, WorkerSideV1 } from './fixtures/launch-protocol-v1.js';

const FIRST_PROTOCOL: Protocol = {
  Host: HostSideV1,
  Worker: WorkerSideV1 as unknown as Protocol['Worker'],
  publication: PUBLICATION_V1,
};

function check(t: TestContext, scenario: Scenario, protocol?: Protocol): Exploration {
  const started = performance.now();
  const result = explore(new LaunchModel(scenario, protocol), { maxStates: 3_000_000 });
  t.diagnostic(
    `${result.states} states, schedules up to ${result.deepest} steps, ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  return result;
}

/** Asserts an exhaustive exploration without violations. */
function holds(t: TestContext, scenario: Scenario): void {
  const result = check(t, scenario);
  assert.equal(result.violation, undefined, describeViolation(result.violation));
  assert.equal(result.bounded, false, 'the exploration must be exhaustive');
}

describe('launch protocol (model-checked)', { timeout: 600_000 }, () => {
  describe('the first protocol, as a witness that the checker finds real faults', () => {
    it('runs a team twice: a stale ticket reads the payload of the launch published after it', (t) => {
      const result = check(
        t,
        { slots: 1, workers: 2, launches: [{ teams: 1 }, { teams: 2 }], safetyOnly: true },
        FIRST_PROTOCOL,
      );
      assert.ok(result.violation, 'the checker must find the stale-ticket race');
      assert.match(result.violation.message, /runs team 1 of launch 0 with another launch's payload/);
      t.diagnostic(describeViolation(result.violation));
    });

    it('hangs: STATE = READY stored after TICKET overwrites the DONE of a launch already finished', (t) => {
      const result = check(t, { slots: 1, workers: 2, launches: [{ teams: 1 }, { teams: 2 }] }, FIRST_PROTOCOL);
      assert.ok(result.violation, 'the checker must find the lost completion');
      assert.match(result.violation.message, /launches 1 never completed/);
      t.diagnostic(describeViolation(result.violation));
    });
  });

  describe('the protocol', () => {
    it('is exact with 2 workers on one slot: launches of 1 and 2 teams, the slot reused', (t) => {
      holds(t, { slots: 1, workers: 2, launches: [{ teams: 1 }, { teams: 2 }] });
    });

    it('is exact when the program awaits each launch before the next', (t) => {
      holds(t, { slots: 1, workers: 2, launches: [{ teams: 2, awaited: true }, { teams: 1 }] });
    });

    it('is exact with 3 workers competing for the teams of one launch', (t) => {
      holds(t, { slots: 1, workers: 3, launches: [{ teams: 2 }] });
    });

    it('is exact with two slots in flight at once', (t) => {
      holds(t, { slots: 2, workers: 2, launches: [{ teams: 1 }, { teams: 2 }] });
    });

    it('stays exact when waits return early (their time bound)', (t) => {
      holds(t, { slots: 1, workers: 2, launches: [{ teams: 2 }], spuriousWakeups: true });
    });

    it('withdraws a launch past its time limit at any point, and the next launch completes in its slot', (t) => {
      holds(t, { slots: 1, workers: 2, launches: [{ teams: 2, withdrawable: true }, { teams: 1 }] });
    });

    it('survives a worker dying at any step: its launch completes, or fails if the worker held one of its teams', (t) => {
      holds(t, { slots: 1, workers: 2, launches: [{ teams: 2 }], deaths: 1 });
    });
  });
});
