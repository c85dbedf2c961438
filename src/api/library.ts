import type { EntryInfo } from '../image/manifest.js';
import type { LibraryRecord } from '../runtime/image-registry.js';
import type { RuntimeContext } from './context.js';

/** A registered bundle. Its images load on each device on first use. */
export class Library {
  /** @internal Use `runtime.register()`. */
  constructor(
    /** @internal */ readonly record: LibraryRecord,
    /** @internal */ readonly context: RuntimeContext,
  ) {}

  get name(): string {
    return this.record.name;
  }

  /** The kernels the bundle provides, with their parameters. */
  get kernels(): readonly EntryInfo[] {
    return this.record.bundle.manifest.entries.filter((entry) => entry.kind === 'kernel');
  }

  get unregistered(): boolean {
    return this.record.unregistered;
  }

  /**
   * Unloads the library's images from every device, in the reverse order they were loaded.
   * Kernels of the library are refused from now on; launches already enqueued complete first.
   */
  async unregister(): Promise<void> {
    this.context.checkOpen();
    await this.context.registry.unregister(this.record);
  }

  /** `await using library = await runtime.register(path)` unregisters it at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (!this.context.isClosed) await this.unregister();
  }
}
