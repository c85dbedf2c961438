/**
 * Where the polling policies tell what they chose, in words (the runtime's debug log). Apart from
 * poll-window.ts, which reads the machine's load, so that the remote plugin can name the sink in
 * a page, where nothing polls.
 */
import type { PollPolicy } from './poll-policy.js';

let reporter: ((line: string) => void) | undefined;

/** Sends each change of a polling policy's choice, in words, to `sink` (the runtime's debug log). */
export function reportPollingTo(sink: (line: string) => void): void {
  reporter = sink;
}

/** Tells the reporter what `policy` does now, if that changed; `who` names the thread's transport. */
export function reportPolicy(who: string, policy: PollPolicy): void {
  if (!reporter) return;
  const change = policy.changed();
  if (change !== undefined) reporter(`${who}: ${change}`);
}
