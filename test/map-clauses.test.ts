/**
 * `map.*` hands back the clause it made last while the same array (and name) is named, until the
 * event loop's next turn: the clause is a frozen value, a method taken off `map` still works, a
 * bad argument is still refused, and no array stays reachable through a clause after that turn.
 */
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, it } from 'node:test';
import { map, type MapSpec } from '../src/index.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('map clauses', { timeout: 30_000 }, () => {
  it('are the same value for the same array, name and form within a turn', () => {
    const x = new Float32Array(4);
    const y = new Float32Array(4);
    const first = map.to(x);
    assert.equal(map.to(x), first);
    assert.notEqual(map.to(x, 'x'), first, 'a name makes another clause');
    assert.equal(map.to(x, 'x'), map.to(x, 'x'));
    assert.notEqual(map.to(y), map.to(x));
    assert.notEqual(map.tofrom(x), map.to(x));
    assert.notEqual(map.always.to(x), map.to(x));
    assert.equal(map.always.to(x).always, true);
    assert.equal(map.present.to(x).present, true);
    assert.equal(map.always.present.to(x).always && map.always.present.to(x).present, true);
    assert.equal(map.to(x.subarray(1)).view.byteOffset, 4, 'a sub-array is its own view');
  });

  it('are frozen, so that a clause handed out twice cannot be changed under its other holder', () => {
    const x = new Int32Array(2);
    const clause = map.tofrom(x);
    assert.ok(Object.isFrozen(clause));
    assert.throws(() => {
      (clause as { view: unknown }).view = new Int32Array(8);
    }, TypeError);
    assert.equal(map.tofrom(x).view, x);
  });

  it('work as functions taken off map', () => {
    const { to, tofrom } = map;
    const x = new Uint8Array(1);
    assert.equal(to(x).type, 'to');
    assert.equal(tofrom(x).view, x);
  });

  it('refuse a bad view or name, also right after a clause was handed out', () => {
    const x = new Float64Array(1);
    map.to(x);
    for (const bad of [undefined, null, 5, 'text', {}, [1, 2]]) {
      assert.throws(() => map.to(bad as Float64Array), {
        code: 'INVALID_ARGUMENT',
        message: /map\.to: expected a TypedArray/,
      });
    }
    assert.throws(() => map.to(x, 5 as unknown as string), {
      code: 'INVALID_ARGUMENT',
      message: /the name must be a string/,
    });
    assert.equal(map.to(x).view, x);
  });

  it('are made anew after the turn, and keep no array alive', async () => {
    let ref: WeakRef<Float32Array> | undefined;
    let before: MapSpec | undefined;
    (() => {
      const big = new Float32Array(1 << 20);
      ref = new WeakRef(big);
      before = map.alloc(big);
    })();
    const x = new Float32Array(2);
    const early = map.from(x);
    await nextTurn();
    assert.notEqual(map.from(x), early, 'a clause outlived its turn');
    before = undefined;
    // deref() keeps its target alive until the job ends: collect in a later job than any deref.
    gc();
    await nextTurn();
    assert.equal(before, undefined);
    assert.equal(ref.deref(), undefined, 'a clause kept its array alive after the turn');
  });
});
