/**
 * The checks and names of map clauses the mapper's constructs share: which clauses a construct
 * takes, how a clause is written in errors and OFFLOAD_INFO, and the error of a `present`
 * clause whose range is not mapped.
 */
import { errors } from '../errors.js';
import { isMapSpec, type MapSpec, type MapType } from './map.js';
import { describeRange } from './table.js';

/** The types `exitData` takes: those that leave a mapping. */
export const EXIT_TYPES: readonly MapType[] = ['from', 'tofrom', 'release', 'delete'];

/** `value` as a list of map clauses of the `allowed` types, for the construct `what`; INVALID_ARGUMENT otherwise. */
export function checkSpecs(value: unknown, what: string, allowed: readonly MapType[], device: number): MapSpec[] {
  const list = Array.isArray(value) ? value : [value];
  return list.map((spec: unknown, index) => {
    if (!isMapSpec(spec))
      throw errors.invalidArgument(
        `${what}: element ${index} must be a map clause (map.to(x), ...), got ${spec === null ? 'null' : typeof spec}`,
        device,
      );
    if (!allowed.includes(spec.type))
      throw errors.invalidArgument(
        `${what}: map.${spec.type} is not allowed here (use ${allowed.map((t) => `map.${t}`).join(', ')})`,
        device,
      );
    return spec;
  });
}

/** How a clause is written, for errors and OFFLOAD_INFO: `map.present.to`. */
export function clauseName(spec: MapSpec): string {
  return `map.${spec.always ? 'always.' : ''}${spec.present ? 'present.' : ''}${spec.type}`;
}

/** NOT_FOUND for a `present` clause whose range is not mapped on `device`. */
export function notPresent(spec: MapSpec, device: number, what = clauseName(spec)): Error {
  return errors.notFound(
    `${what}: ${describeRange(spec.view, spec.name)} is not present on device ${device}; map it first (enterData or an enclosing targetData), or drop 'present'`,
    device,
  );
}
