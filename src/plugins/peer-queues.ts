/**
 * The queues a plugin queue keeps on other devices for the far side of cross-device copies, one
 * per device, created on first use and destroyed with the queue that owns them.
 */
import type { PluginDevice, PluginQueue } from './interface.js';

export class PeerQueues {
  private readonly queues = new Map<PluginDevice, PluginQueue>();

  of(device: PluginDevice): PluginQueue {
    let queue = this.queues.get(device);
    if (!queue) this.queues.set(device, (queue = device.createQueue()));
    return queue;
  }

  async destroy(): Promise<void> {
    const queues = [...this.queues.values()];
    this.queues.clear();
    await Promise.all(queues.map((queue) => queue.destroy()));
  }
}
