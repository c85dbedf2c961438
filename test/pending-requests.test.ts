/**
 * A remote connection's pending requests (src/plugins/remote/pending-requests.ts) against a Map,
 * the structure it stands in for: the same answers to every get, delete and size, and the same
 * order of iteration (oldest first), over random sequences of requests sent and answered.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PendingRequests } from '../src/plugins/remote/pending-requests.js';
import { seededRandom } from './helpers/random.js';

test('pending requests answer as a Map does, oldest first, over 2,000 random sequences', { timeout: 60_000 }, () => {
  for (let seed = 1; seed <= 2000; seed++) {
    const random = seededRandom(seed);
    const pending = new PendingRequests<string>();
    const model = new Map<number, string>();
    let nextId = 1;
    const steps: string[] = [];
    for (let step = 0; step < 60; step++) {
      const roll = random();
      const live = [...model.keys()];
      if (roll < 0.45 || live.length === 0) {
        // A request sent: ids only increase.
        const id = nextId++;
        pending.set(id, `request ${id}`);
        model.set(id, `request ${id}`);
        steps.push(`set ${id}`);
      } else if (roll < 0.9) {
        // Its reply (any pending one: replies of different queues come in any order), or a stray id.
        const id = random() < 0.9 ? live[Math.floor(random() * live.length)]! : nextId + 5;
        steps.push(`delete ${id}`);
        assert.equal(pending.delete(id), model.delete(id), steps.join(', '));
      } else {
        // The connection failed: everything pending goes.
        pending.clear();
        model.clear();
        steps.push('clear');
      }
      const where = `seed ${seed}: ${steps.join(', ')}`;
      assert.equal(pending.size, model.size, where);
      assert.deepEqual([...pending], [...model], where);
      assert.deepEqual(pending.values(), [...model.values()], where);
      for (let id = Math.max(1, nextId - 8); id <= nextId + 1; id++)
        assert.equal(pending.get(id), model.get(id), where);
    }
  }
});
