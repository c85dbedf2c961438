/**
 * The cost of the mapping layer on the host device: a `target` call whose array is already
 * present (a table hit, no copy) against a bare launch, both on an empty kernel; and a `target`
 * with `tofrom` of 64 MiB against the hand-written write / launch / read it stands for.
 */
import { map, Offload } from '../offload.js';
import { benchBundle } from '../kernel-bundle.js';
import { measure, withMoreRepetitions } from '../measure.js';
import type { Suite } from '../suite.js';

const MiB = 1024 * 1024;

export const mappingSuite: Suite = {
  name: 'mapping',
  description: 'OpenMP-style mapping (runtime.target) against the queue operations it replaces, host device',
  async run(plan, progress) {
    const runtime = await Offload.init({ host: { memoryBytes: 512 * MiB } });
    try {
      const device = runtime.devices[0]!;
      const library = await runtime.register(await benchBundle());
      const touch = await device.kernel(library, 'saxpy');
      const queue = device.queue();
      const rounds = plan.quick ? 1000 : 10_000;

      progress('mapping: present-table hit vs bare launch');
      const small = new Float32Array(16);
      const smallBuffer = await device.alloc(small.byteLength);
      // A repetition of this pair is 10,000 calls, 4-5 ms: a few ms of a busy neighbour move one
      // of nine by 10 % and more, so it takes five times the plan's repetitions (0.5 s in all).
      const hitPlan = withMoreRepetitions(plan, 5);
      const [hit, bare] = await runtime.targetData(device, [map.tofrom(small)], () =>
        measure(hitPlan, [
          {
            label: `await runtime.target(device, saxpy, { teams: 1 }, [0, 0, map.to(x), map.tofrom(x)]) with x present (table hits, no copies), ${rounds} times (${hitPlan.repetitions} repetitions)`,
            count: rounds,
            run: async () => {
              for (let i = 0; i < rounds; i++)
                await runtime.target(device, touch, { teams: 1 }, [0, 0, map.to(small), map.tofrom(small)]);
            },
          },
          {
            label: `await queue.launch(saxpy, { teams: 1 }, [0, 0, x, x]).done, ${rounds} times (${hitPlan.repetitions} repetitions)`,
            count: rounds,
            run: async () => {
              for (let i = 0; i < rounds; i++)
                await queue.launch(touch, { teams: 1 }, [0, 0, smallBuffer, smallBuffer]).done;
            },
          },
        ]),
      );
      await smallBuffer.free();

      progress('mapping: target tofrom 64 MiB vs write/launch/read');
      const n = (64 * MiB) / 4;
      const x = new Float32Array(n).fill(1);
      const y = new Float32Array(n).fill(2);
      const [xBuffer, yBuffer] = [await device.alloc(x.byteLength), await device.alloc(y.byteLength)];
      const teams = 8 * device.info.computeUnits;
      const [mapped, manual] = await measure(plan, [
        {
          label:
            'await runtime.target(device, saxpy, { teams }, [n, 1, map.to(x), map.tofrom(y)]) (alloc, 2 writes, launch, read, free)',
          count: 3 * x.byteLength,
          run: () => runtime.target(device, touch, { teams }, [n, 1, map.to(x), map.tofrom(y)]),
        },
        {
          label:
            'queue.write(x), queue.write(y), queue.launch(saxpy), queue.read(y), await finish() on buffers allocated once',
          count: 3 * x.byteLength,
          run: () => {
            queue.write(xBuffer, x);
            queue.write(yBuffer, y);
            queue.launch(touch, { teams }, [n, 1, xBuffer, yBuffer]);
            queue.read(yBuffer, y);
            return queue.finish();
          },
        },
      ]);
      await Promise.all([xBuffer.free(), yBuffer.free()]);
      return [
        {
          name: 'target with present maps vs bare launch (tiny kernel)',
          unit: 'us',
          offload: hit!,
          baseline: bare!,
          goal: { op: '<=', value: 1.1 },
        },
        {
          name: 'target tofrom 64 MiB (saxpy, x to, y tofrom) vs hand-written copies',
          unit: 'GB/s',
          offload: mapped!,
          baseline: manual!,
          goal: { op: '~', value: 1 },
        },
      ];
    } finally {
      await runtime.shutdown();
    }
  },
};
