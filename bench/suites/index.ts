/** Every bench suite, in the order `npm run bench` runs them. Later suites register here. */
import type { Suite } from '../suite.js';
import { browserSuite } from './browser.js';
import { hostSuite } from './host.js';
import { mappingSuite } from './mapping.js';
import { mpiSuite } from './mpi.js';
import { remoteSuite } from './remote.js';
import { spreadSuite } from './spread.js';
import { webgpuSuite } from './webgpu.js';

export const suites: readonly Suite[] = [
  hostSuite,
  remoteSuite,
  mappingSuite,
  mpiSuite,
  spreadSuite,
  webgpuSuite,
  browserSuite,
];
