/**
 * Headless Chromium for tests, driven by playwright-core: Debian's /usr/bin/chromium (never a
 * downloaded browser), a fresh profile per launch, nothing fetched from outside. A test skips
 * when that binary is missing, unless OFFLOAD_REQUIRE_BROWSER=1 (CI sets it), where it fails.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

/** Why browser tests cannot run here (undefined: they can); throws where they must run and cannot. */
export function browserMissing(): string | undefined {
  if (existsSync(CHROMIUM)) return undefined;
  if (process.env.OFFLOAD_REQUIRE_BROWSER === '1')
    throw new Error(`OFFLOAD_REQUIRE_BROWSER=1 but ${CHROMIUM} is missing (apt-get install chromium)`);
  return `${CHROMIUM} is missing`;
}

/** A headless browser with a profile of its own; `close()` ends it and removes the profile. */
export async function launchBrowser(options: { webgpu?: boolean } = {}): Promise<{
  context: BrowserContext;
  close(): Promise<void>;
}> {
  const profile = await mkdtemp(path.join(tmpdir(), 'offload-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      ...(options.webgpu ? ['--enable-unsafe-webgpu'] : ['--disable-gpu']),
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    context,
    async close() {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}
