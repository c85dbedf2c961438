/**
 * An npm registry on 127.0.0.1 that serves exactly the packages of this checkout's lockfile, from
 * its node_modules: a real `npm install` in a fresh project runs offline and installs the versions
 * CI tested, whatever npm's own cache holds. Packuments come from each installed package.json
 * (from the lockfile's entry for a package not installed here, e.g. another platform's esbuild,
 * which npm then leaves out by its os/cpu); tarballs are the installed folders, tarred on request
 * (uncompressed: npm's tar reader takes both). No integrity is given, so npm computes its own.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';

interface LockEntry {
  version?: string;
  link?: boolean;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, unknown>;
  os?: string[];
  cpu?: string[];
  engines?: Record<string, string>;
  bin?: Record<string, string> | string;
}

/** The fields of a package.json that npm's resolver reads from a packument's version. */
const MANIFEST_FIELDS = [
  'name',
  'version',
  'dependencies',
  'optionalDependencies',
  'peerDependencies',
  'peerDependenciesMeta',
  'bundleDependencies',
  'os',
  'cpu',
  'engines',
  'bin',
  'license',
] as const;

export interface LocalRegistry {
  /** `http://127.0.0.1:port/`, for `npm_config_registry`. */
  url: string;
  /** Packuments and tarballs served so far, by path (what the install asked for). */
  requests: string[];
  close(): Promise<void>;
}

/** Starts the registry over `root`'s package-lock.json and node_modules. */
export async function startLocalRegistry(root: string): Promise<LocalRegistry> {
  const lock = JSON.parse(readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, LockEntry>;
  };
  const packuments = new Map<string, { versions: Record<string, Record<string, unknown>>; latest: string }>();
  const tarballs: string[] = [];
  let base = '';
  for (const [key, entry] of Object.entries(lock.packages)) {
    const at = key.lastIndexOf('node_modules/');
    if (at < 0 || entry.link || entry.version === undefined) continue;
    const name = key.slice(at + 'node_modules/'.length);
    const dir = path.join(root, key);
    const installed = existsSync(path.join(dir, 'package.json'));
    const source: Record<string, unknown> = installed
      ? (JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as Record<string, unknown>)
      : { ...entry, name };
    const manifest: Record<string, unknown> = {};
    for (const field of MANIFEST_FIELDS) if (source[field] !== undefined) manifest[field] = source[field];
    if (installed) {
      tarballs.push(dir);
      manifest.dist = { tarball: `/-/tarball/${tarballs.length - 1}.tar` };
    } else manifest.dist = { tarball: '/-/not-installed-here.tar' };
    const packument = packuments.get(name) ?? { versions: {}, latest: entry.version };
    packument.versions[entry.version] = manifest;
    // The top-level copy is the one a fresh project resolves to first.
    if (at === 0) packument.latest = entry.version;
    packuments.set(name, packument);
  }

  const requests: string[] = [];
  const server = http.createServer((request, response) => {
    const url = decodeURIComponent((request.url ?? '/').split('?')[0]!);
    requests.push(url);
    const tarball = /^\/-\/tarball\/(\d+)\.tar$/.exec(url);
    if (tarball) {
      const dir = tarballs[Number(tarball[1])]!;
      // npm's tarballs hold one folder named package/.
      const tar = spawn(
        'tar',
        ['-cf', '-', '-C', path.dirname(dir), `--transform=s,^${path.basename(dir)},package,`, path.basename(dir)],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      response.writeHead(200, { 'content-type': 'application/octet-stream' });
      tar.stdout.pipe(response);
      return;
    }
    const packument = packuments.get(url.slice(1));
    if (!packument) {
      response.writeHead(404, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ error: `${url.slice(1)} is not in this checkout's lockfile` }));
      return;
    }
    const versions = Object.fromEntries(
      Object.entries(packument.versions).map(([version, manifest]) => [
        version,
        { ...manifest, dist: { tarball: base + (manifest.dist as { tarball: string }).tarball.slice(1) } },
      ]),
    );
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ name: url.slice(1), 'dist-tags': { latest: packument.latest }, versions }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  return {
    url: base,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
