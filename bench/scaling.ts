/**
 * `node --import tsx bench/scaling.ts [xsbench|rsbench] [lookups per proxy]`: strong and weak
 * scaling of a proxy app over 1 and 2 local proxies (one worker each), measured with
 * `offload bench <app> --proxies N --devices remote` runs, written as SVG charts to
 * bench/scaling-<app>.svg and printed as a table. Needs `npm run build` (runs dist/).
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const app = process.argv[2] ?? 'xsbench';
const perProxy = Number(process.argv[3] ?? (app === 'xsbench' ? 2_000_000 : 500_000));
const cli = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url));
const PROXIES = [1, 2];

function lookupsPerSecond(proxies: number, lookups: number): number {
  const args = [cli, 'bench', app, '--lookups', String(lookups), '--proxies', String(proxies), '--devices', 'remote'];
  if (app === 'xsbench') args.push('--grid', 'hash');
  const run = spawnSync(process.execPath, args, {
    encoding: 'utf8',
    env: { ...process.env, OFFLOAD_HOST_THREADS: '1' },
  });
  const match = /: ([\d,]+) lookups\/s/.exec(run.stdout);
  if (run.status !== 0 || !match) throw new Error(`offload bench failed:\n${run.stdout}\n${run.stderr}`);
  return Number(match[1]!.replace(/,/g, ''));
}

/** A bar chart: one group per proxy count, bars for strong and weak scaling, with ideal marks. */
function svg(title: string, strong: number[], weak: number[]): string {
  const width = 520;
  const height = 300;
  const left = 70;
  const bottom = 250;
  const top = 40;
  const max = Math.max(...strong, ...weak, strong[0]! * PROXIES.at(-1)!) * 1.1;
  const y = (value: number) => bottom - ((bottom - top) * value) / max;
  const parts: string[] = [];
  parts.push(`<text x="${width / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${title}</text>`);
  parts.push(
    `<line x1="${left}" y1="${bottom}" x2="${width - 20}" y2="${bottom}" stroke="#333"/><line x1="${left}" y1="${top}" x2="${left}" y2="${bottom}" stroke="#333"/>`,
  );
  for (let tick = 0; tick <= 4; tick++) {
    const value = (max / 4) * tick;
    parts.push(
      `<text x="${left - 6}" y="${y(value) + 4}" text-anchor="end" font-size="11">${(value / 1e6).toFixed(2)}M</text>`,
    );
    parts.push(`<line x1="${left}" y1="${y(value)}" x2="${width - 20}" y2="${y(value)}" stroke="#ddd"/>`);
  }
  parts.push(
    `<text x="16" y="${(top + bottom) / 2}" transform="rotate(-90 16 ${(top + bottom) / 2})" text-anchor="middle" font-size="12">lookups/s</text>`,
  );
  const group = (width - left - 40) / PROXIES.length;
  PROXIES.forEach((count, i) => {
    const x0 = left + 20 + i * group;
    const bars: [string, number, string][] = [
      ['strong', strong[i]!, '#4477aa'],
      ['weak', weak[i]!, '#ee7733'],
    ];
    bars.forEach(([label, value, colour], b) => {
      const x = x0 + b * 70;
      parts.push(
        `<rect x="${x}" y="${y(value)}" width="60" height="${bottom - y(value)}" fill="${colour}"><title>${label}: ${Math.round(value)} lookups/s</title></rect>`,
      );
      parts.push(
        `<text x="${x + 30}" y="${y(value) - 5}" text-anchor="middle" font-size="11">${(value / 1e6).toFixed(2)}M</text>`,
      );
    });
    const ideal = strong[0]! * count;
    parts.push(
      `<line x1="${x0 - 5}" y1="${y(ideal)}" x2="${x0 + 135}" y2="${y(ideal)}" stroke="#228833" stroke-dasharray="5,3"/>`,
    );
    parts.push(
      `<text x="${x0 + 65}" y="${bottom + 18}" text-anchor="middle" font-size="12">${count} prox${count === 1 ? 'y' : 'ies'}</text>`,
    );
  });
  parts.push(
    `<rect x="${width - 200}" y="${top}" width="10" height="10" fill="#4477aa"/><text x="${width - 185}" y="${top + 9}" font-size="11">strong (fixed total)</text>`,
  );
  parts.push(
    `<rect x="${width - 200}" y="${top + 16}" width="10" height="10" fill="#ee7733"/><text x="${width - 185}" y="${top + 25}" font-size="11">weak (fixed per proxy)</text>`,
  );
  parts.push(
    `<line x1="${width - 200}" y1="${top + 37}" x2="${width - 190}" y2="${top + 37}" stroke="#228833" stroke-dasharray="5,3"/><text x="${width - 185}" y="${top + 41}" font-size="11">ideal (1 proxy x N)</text>`,
  );
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif">\n${parts.join('\n')}\n</svg>\n`;
}

const strong = PROXIES.map((count) => lookupsPerSecond(count, perProxy * PROXIES.at(-1)!));
const weak = PROXIES.map((count) => lookupsPerSecond(count, perProxy * count));
const file = fileURLToPath(new URL(`./scaling-${app}.svg`, import.meta.url));
writeFileSync(file, svg(`${app}: lookups/s over local proxies (1 worker each)`, strong, weak));
console.log(
  `| proxies | strong (${(perProxy * PROXIES.at(-1)!).toLocaleString('en-US')} lookups) | speedup | weak (${perProxy.toLocaleString('en-US')} per proxy) | efficiency |`,
);
console.log('|---|---|---|---|---|');
PROXIES.forEach((count, i) => {
  console.log(
    `| ${count} | ${Math.round(strong[i]!).toLocaleString('en-US')}/s | ${(strong[i]! / strong[0]!).toFixed(2)} | ${Math.round(weak[i]!).toLocaleString('en-US')}/s | ${((weak[i]! / weak[0]! / count) * 100).toFixed(0)} % |`,
  );
});
console.log(`wrote ${file}`);
