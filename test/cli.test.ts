// The `offload` command, run as a real child process (through tsx, so no build is needed).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { startProxy } from './helpers/proxy.js';
import { nativeCompilers } from './helpers/native-compilers.js';
import { webgpuSkipReason } from './helpers/webgpu.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const main = path.join(root, 'src/cli/main.ts');

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

function offload(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', main, ...args],
      { cwd: root, env: { ...process.env, ...env }, timeout: 120_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

describe('offload command', { timeout: 300_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'offload-cli-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('prints its commands with --help (status 0) and with no arguments (on stderr, status 2)', async () => {
    for (const args of [['--help'], []]) {
      const { code, stdout, stderr } = await offload(args);
      assert.equal(code, args.length === 0 ? 2 : 0);
      for (const command of ['devices', 'build', 'demo', 'proxy', 'launch', 'bench'])
        assert.match(args.length === 0 ? stderr : stdout, new RegExp(`^  ${command} `, 'm'));
    }
  });

  it('exits 2 with a pointer to the help on usage errors', async () => {
    const unknown = await offload(['frobnicate']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown command 'frobnicate'/);
    const badFlag = await offload(['devices', '--colour']);
    assert.equal(badFlag.code, 2);
    assert.match(badFlag.stderr, /--colour/);
    assert.match(badFlag.stderr, /offload devices --help/);
    const noOutput = await offload(['build', 'test/fixtures/kernels.ts']);
    assert.equal(noOutput.code, 2);
    assert.match(noOutput.stderr, /-o <out>/);
    const noListen = await offload(['proxy']);
    assert.equal(noListen.code, 2);
    assert.match(noListen.stderr, /--listen/);
    const noToken = await offload(['proxy', '--listen', '127.0.0.1:0'], { OFFLOAD_TOKEN: '' });
    assert.equal(noToken.code, 2);
    assert.match(noToken.stderr, /token is required/);
    const noProgram = await offload(['launch', '-np', '2']);
    assert.equal(noProgram.code, 2);
    assert.match(noProgram.stderr, /no program given/);
    const badCount = await offload(['launch', '-np', 'zero', 'app.js']);
    assert.equal(badCount.code, 2);
    const badSize = await offload(['demo', '--size', 'lots']);
    assert.equal(badSize.code, 2);
    assert.match(badSize.stderr, /--size must be an integer/);
  });

  it('shows the help of each command', async () => {
    for (const command of ['devices', 'build', 'demo', 'proxy', 'launch', 'bench']) {
      const direct = await offload([command, '--help']);
      assert.equal(direct.code, 0);
      assert.match(direct.stdout, new RegExp(`^Usage: offload ${command}`));
      const viaHelp = await offload(['help', command]);
      assert.equal(viaHelp.stdout, direct.stdout);
    }
  });

  it('lists the host device, as a table and as JSON', async () => {
    const env = { OFFLOAD_HOST_THREADS: '3' };
    const json = await offload(['devices', '--json'], env);
    assert.equal(json.code, 0, json.stderr);
    const devices = JSON.parse(json.stdout) as {
      id: number;
      plugin: string;
      computeUnits: number;
      memoryKinds: string[];
    }[];
    assert.equal(devices[0]!.id, 0);
    assert.equal(devices[0]!.plugin, 'host');
    assert.equal(devices[0]!.computeUnits, 3);
    const text = await offload(['devices'], env);
    assert.equal(text.code, 0);
    assert.match(text.stdout, /^plugin\s+host/m);
    assert.match(text.stdout, /^compute units\s+3/m);
  });

  it('reports a bad configuration as a coded error with exit status 1', async () => {
    const { code, stderr } = await offload(['devices'], { OFFLOAD_HOST_THREADS: 'many' });
    assert.equal(code, 1);
    assert.match(stderr, /^offload: error \[INVALID_ARGUMENT\]: .*OFFLOAD_HOST_THREADS/m);
  });

  it('builds a bundle and prints the kernel signatures', async () => {
    const output = path.join(dir, 'fixture');
    const { code, stdout, stderr } = await offload(['build', 'test/fixtures/kernels.ts', '-o', output]);
    assert.equal(code, 0, stderr);
    assert.match(stdout, new RegExp(`wrote ${output.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.offload`));
    assert.match(stdout, /kernel {3}saxpy\(n: i32, a: f32, x: ptr, y: ptr\)/);
    assert.match(stdout, /kernel {3}sum_i64\(/);
  });

  it('reports a missing kernel source as a coded error', async () => {
    const { code, stderr } = await offload(['build', path.join(dir, 'absent.ts'), '-o', path.join(dir, 'absent')]);
    assert.equal(code, 1);
    assert.match(stderr, /^offload: error \[[A-Z_]+\]: .*absent\.ts/m);
  });

  it('runs the demo and checks every result, the Rust saxpy and the C mandelbrot too', async () => {
    const { code, stdout, stderr } = await offload(['demo', '--size', '10000'], { OFFLOAD_WEBGPU: 'off' });
    assert.equal(code, 0, stderr);
    for (const kernel of ['saxpy', 'dot_partial', 'mandelbrot'])
      assert.match(stdout, new RegExp(`^${kernel} .*checked: OK$`, 'm'));
    if (await nativeCompilers()) {
      assert.match(stdout, /^saxpy \(Rust\) .*checked: OK$/m);
      assert.match(stdout, /^mandelbrot \(C\) .*checked: OK$/m);
      assert.match(stdout, /all 6 kernels checked OK/);
    } else assert.match(stdout, /all 4 kernels checked OK[\s\S]*not built: saxpy \(Rust\)/);
  });

  it('runs the demo on a WebGPU device too: every kernel, translated to WGSL from the one source', async (t) => {
    const reason = await webgpuSkipReason();
    if (reason) return t.skip(reason);
    const { code, stdout, stderr } = await offload(['demo', '--size', '10000'], { OFFLOAD_WEBGPU: 'fallback' });
    assert.equal(code, 0, stderr);
    for (const kernel of ['saxpy', 'dot_partial', 'mandelbrot'])
      assert.match(stdout, new RegExp(`^${kernel} +1 .*\\(WebGPU.* x 64 .*checked: OK$`, 'm'));
    assert.doesNotMatch(stdout, /not in the device's image/);
    if (await nativeCompilers()) {
      assert.match(stdout, /^runs on wasm devices only: saxpy \(Rust\) on device 1, mandelbrot \(C\) on device 1$/m);
      assert.match(stdout, /all 10 kernels checked OK on 2 devices/);
    } else assert.match(stdout, /all 8 kernels checked OK on 2 devices/);
  });

  it('lists the WebGPU device with its adapter limits, or says why there is none', async (t) => {
    const off = await offload(['devices'], { OFFLOAD_WEBGPU: 'off' });
    assert.equal(off.code, 0, off.stderr);
    assert.match(off.stdout, /^no WebGPU device: the WebGPU plugin is turned off/m);
    const reason = await webgpuSkipReason();
    if (reason) return t.skip(reason);
    const { code, stdout, stderr } = await offload(['devices'], { OFFLOAD_WEBGPU: 'fallback' });
    assert.equal(code, 0, stderr);
    assert.match(stdout, /^plugin +host +webgpu$/m);
    assert.match(stdout, /^image formats +wasm +wgsl$/m);
    assert.match(stdout, /^device 1 limits: .*maxComputeWorkgroupsPerDimension \d+/m);
    const json = await offload(['devices', '--json'], { OFFLOAD_WEBGPU: 'fallback' });
    const devices = JSON.parse(json.stdout) as { plugin: string; limits?: Record<string, number> }[];
    assert.ok(devices[1]!.plugin === 'webgpu' && devices[1]!.limits!.maxBufferSize! > 0);
  });

  it('builds a bundle with a wasm and a wgsl image', async () => {
    const output = path.join(dir, 'both');
    const { code, stdout, stderr } = await offload([
      'build',
      'test/fixtures/kernels.ts',
      'test/fixtures/kernels.wgsl',
      '-o',
      output,
    ]);
    assert.equal(code, 0, stderr);
    assert.match(stdout, /image {4}wasm32-unknown-offload/);
    // scan_memory, grid3d and team_scan from the .wgsl file, 10 kernels translated from the .ts file; a note for each of the other 9.
    assert.match(stdout, /image {4}wgsl-unknown-webgpu, .*, 13 kernels from kernels\.wgsl/);
    const notes = stderr.split('\n').filter((line) => line.startsWith('note: '));
    assert.deepEqual(
      notes.map((line) => /kernel '(\w+)'/.exec(line)![1]),
      [
        'scale_f64',
        'sum_i64',
        'trap_oob',
        'trap_abort',
        'trap_unreachable',
        'mixed',
        'say',
        'call_host',
        'tally_teams',
      ],
    );
    assert.match(
      stderr,
      /^note: test\/fixtures\/kernels\.ts:\d+: kernel 'say' is not translated to WGSL \(it runs on wasm devices only\): it calls print\(\)/m,
    );
    const required = await offload(['build', 'test/fixtures/kernels.ts', '--wgsl=require', '-o', output]);
    assert.equal(required.code, 1);
    assert.match(required.stderr, /INVALID_ARGUMENT.*--wgsl=require: 10 kernel\(s\) cannot be translated/);
    assert.match(
      required.stderr,
      /kernels\.ts:\d+: kernel 'scan_memory' .*cannot be traced back to one pointer parameter|kernel 'scan_memory' .*compares an address/,
    );
    const badMode = await offload(['build', 'test/fixtures/kernels.ts', '--wgsl=maybe', '-o', output]);
    assert.equal(badMode.code, 2);
    assert.match(badMode.stderr, /--wgsl must be auto, require or off/);
    const twoWgsl = await offload([
      'build',
      'test/fixtures/kernels.wgsl',
      'test/fixtures/webgpu/abi.wgsl',
      '-o',
      output,
    ]);
    assert.equal(twoWgsl.code, 1);
    assert.match(twoWgsl.stderr, /INVALID_ARGUMENT.*one WGSL image/);
  });

  it('runs the demo on a local proxy too, and lists the proxy devices with where they live', async () => {
    const { code, stdout, stderr } = await offload(['demo', '--size', '1000', '--proxies', '1'], {
      OFFLOAD_HOST_THREADS: '1',
      OFFLOAD_WEBGPU: 'off',
    });
    assert.equal(code, 0, stderr);
    const proxy = /^proxy +(\S+) /m.exec(stdout)![1]!;
    for (const kernel of ['saxpy', 'dot_partial', 'mandelbrot'])
      assert.match(stdout, new RegExp(`^${kernel} +1 host .* @ ${proxy.replace(/\./g, '\\.')} .*checked: OK$`, 'm'));
    if (await nativeCompilers()) {
      // The Rust saxpy and the C mandelbrot run on the proxy's host device too.
      assert.match(
        stdout,
        new RegExp(`^saxpy \\(Rust\\) +1 host .* @ ${proxy.replace(/\./g, '\\.')} .*checked: OK$`, 'm'),
      );
      assert.match(stdout, /all 12 kernels checked OK on 2 devices/);
    } else assert.match(stdout, /all 8 kernels checked OK on 2 devices/);
  });

  it('lists remote devices with --proxies and a token file', async () => {
    const proxy = await startProxy({ threads: 1 });
    try {
      const tokenFile = path.join(dir, 'token');
      await writeFile(tokenFile, `${proxy.token}\n`, { mode: 0o600 });
      const { code, stdout, stderr } = await offload([
        'devices',
        '--json',
        '--proxies',
        proxy.address,
        '--token-file',
        tokenFile,
      ]);
      assert.equal(code, 0, stderr);
      const devices = JSON.parse(stdout) as { plugin: string; location: string }[];
      assert.deepEqual(
        devices.map((d) => [d.plugin, d.location]),
        [
          ['host', 'local'],
          ['remote', proxy.address],
        ],
      );
      await writeFile(tokenFile, 'wrong\n');
      const refused = await offload(['devices', '--proxies', proxy.address, '--token-file', tokenFile]);
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, /^offload: error \[UNAUTHORIZED\]/m);
    } finally {
      await proxy.stop();
    }
  });

  it('runs the proxy apps and verifies their checksums', async () => {
    const xs = await offload(['bench', 'xsbench', '--grid', 'hash', '--lookups', '1000'], {
      OFFLOAD_HOST_THREADS: '2',
    });
    assert.equal(xs.code, 0, xs.stderr);
    assert.match(xs.stdout, /^checksum 3044: VALID$/m);
    assert.match(xs.stdout, /lookups\/s/);
    const rs = await offload(['bench', 'rsbench', '--lookups', '1000'], { OFFLOAD_HOST_THREADS: '2' });
    assert.equal(rs.code, 0, rs.stderr);
    assert.match(rs.stdout, /^checksum 3533: VALID$/m);
    const twice = await offload(['bench', 'xsbench', '--grid', 'hash', '--lookups', '1000', '--repeat', '2'], {
      OFFLOAD_HOST_THREADS: '2',
    });
    assert.equal(twice.code, 0, twice.stderr);
    assert.match(twice.stdout, /^lookups .*: [\d,]+ \([\d,]+-[\d,]+\) lookups\/s, the median of 2 runs$/m);
    assert.match(twice.stdout, /^checksum 3044: VALID$/m);
    for (const repeat of ['0', '21', '2.5', 'many']) {
      const badRepeat = await offload(['bench', 'xsbench', '--repeat', repeat]);
      assert.equal(badRepeat.code, 2);
      assert.match(badRepeat.stderr, new RegExp(`--repeat must be a number of runs from 1 to 20, got '${repeat}'`));
    }
    const unknown = await offload(['bench', 'hpl']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /xsbench or rsbench/);
    const badGrid = await offload(['bench', 'xsbench', '--grid', 'nuclide']);
    assert.equal(badGrid.code, 2);
    assert.match(badGrid.stderr, /--grid must be unionized or hash/);
    const badDevices = await offload(['bench', 'xsbench', '--lookups', '10', '--grid', 'hash', '--devices', '7']);
    assert.equal(badDevices.code, 1);
    assert.match(badDevices.stderr, /\[NOT_FOUND\].*no device 7/);
  });
});
