/**
 * A page cannot ask its JavaScript engine for a collection (package.json's "browser" field puts
 * this file in place of garbage.ts there): the device memory of ended contexts goes back when the
 * page's threads collect on their own.
 */
export function collectGarbageSoon(): void {}

export function collectGarbage(): Promise<void> {
  return Promise.resolve();
}
