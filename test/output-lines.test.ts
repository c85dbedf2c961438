/**
 * Our lines stay apart from Dawn's: `offload devices` and OFFLOAD_INFO / OFFLOAD_DEBUG lines start
 * on a line of their own, with their prefix, even where another writer of the same file stopped
 * mid-line. dawn.node prints its device log ("warning:\n" and a message without a newline) through
 * C's stdout, which a file buffers 4 KiB at a time; here a preloaded module (and the program
 * itself) writes such half lines straight to the file descriptors, as C code does, and real Dawn
 * (lavapipe) adds its own warnings where it is there.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { closeSync, openSync, writeSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { endsMidLine } from '../src/platform.js';
import { webgpuSkipReason } from './helpers/webgpu.js';

const root = path.join(import.meta.dirname, '..');
let work: string;

/** Runs node `args` with stdout and stderr both appended to one file, as `> log 2>&1` does; the file's text. */
async function intoOneFile(name: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const file = path.join(work, name);
  const fd = openSync(file, 'a');
  try {
    const child = spawn(process.execPath, args, {
      cwd: root,
      env: { ...process.env, OFFLOAD_PROXIES: '', OFFLOAD_HOST_THREADS: '1', ...env },
      stdio: ['ignore', fd, fd],
    });
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    const text = await readFile(file, 'utf8');
    assert.equal(code, 0, text);
    return text;
  } finally {
    closeSync(fd);
  }
}

/** A module for --import that writes `text` to fd `fd` as C code would: no newline, past Node's streams. */
const halfLine = (fd: number, text: string): string =>
  `data:text/javascript,${encodeURIComponent(`import { writeSync } from 'node:fs'; writeSync(${fd}, ${JSON.stringify(text)});`)}`;

describe("our lines and Dawn's", { timeout: 120_000 }, () => {
  before(async () => {
    work = await mkdtemp(path.join(os.tmpdir(), 'offload-lines-'));
  });
  after(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('knows when a file ends mid-line, and assumes nothing of what it cannot read back', () => {
    const file = path.join(work, 'probe');
    const fd = openSync(file, 'w');
    try {
      assert.equal(endsMidLine(fd), false, 'an empty file');
      writeSync(fd, 'warning:\nno newline');
      assert.equal(endsMidLine(fd), true);
      writeSync(fd, '\n');
      assert.equal(endsMidLine(fd), false);
    } finally {
      closeSync(fd);
    }
    assert.equal(endsMidLine(-1), false, 'a closed descriptor');
  });

  it('starts the table of offload devices and its debug lines on lines of their own', async () => {
    const webgpu = (await webgpuSkipReason()) === undefined ? 'fallback' : 'off';
    const text = await intoOneFile(
      'devices.log',
      ['--import', 'tsx', '--import', halfLine(1, 'warning:\nDawn stopped mid-line'), 'src/cli/main.ts', 'devices'],
      { OFFLOAD_WEBGPU: webgpu, OFFLOAD_DEBUG: '1' },
    );
    const lines = text.split('\n');
    assert.ok(lines.includes('Dawn stopped mid-line'), text);
    assert.ok(
      lines.some((line) => /^device {2,}0\b/.test(line)),
      `the table's header starts a line:\n${text}`,
    );
    assert.ok(
      lines.some((line) => line.startsWith('offload-ts debug: plugin host: loaded')),
      text,
    );
    // Each of our lines starts with what it is, wherever Dawn's fall.
    for (const line of lines.filter((candidate) => candidate.includes('offload-ts debug:')))
      assert.ok(line.startsWith('offload-ts debug:'), `ran into another line: ${line}`);
    if (webgpu === 'fallback')
      assert.ok(
        lines.some((line) => /^kind +cpu +gpu$/.test(line)),
        text,
      );
  });

  it('starts each OFFLOAD_INFO line on a line of its own after a half line written past it', async () => {
    const program = `
      import { writeSync } from 'node:fs';
      import { Offload } from ${JSON.stringify(path.join(root, 'src/index.ts'))};
      const rt = await Offload.init({ webgpu: false });
      const first = await rt.devices[0].alloc(64);
      writeSync(2, 'error:\\nDawn again, mid-line');
      const second = await rt.devices[0].alloc(64);
      await first.free();
      await second.free();
      await rt.shutdown();`;
    const text = await intoOneFile('info.log', ['--import', 'tsx', '--input-type=module', '-e', program], {
      OFFLOAD_INFO: '1',
    });
    const lines = text.split('\n');
    assert.ok(lines.includes('Dawn again, mid-line'), text);
    const info = lines.filter((line) => line.includes('offload: device 0 info:'));
    assert.equal(info.filter((line) => line.includes('allocated 64 bytes')).length, 2, text);
    for (const line of info) assert.ok(line.startsWith('offload: device 0 info:'), `ran into another line: ${line}`);
  });
});
