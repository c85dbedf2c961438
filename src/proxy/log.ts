/**
 * The proxy's event log: connections, logins, refusals with their reason, sessions ending with
 * what they held, devices lost, shutdown. `offload proxy --log-format json` writes one JSON object
 * per line (`time`, `level`, `event`, `msg`, and the event's fields), which a log pipeline
 * (journald, Loki, Fluent Bit) parses as it is; the default `human` format writes
 * `offload proxy: <msg>` lines. Both go to stderr: stdout keeps the lines programs read
 * (`listening on`, `stats`).
 *
 * Ownership: the log writes through its sink and holds nothing; it never closes the sink.
 */
import { errors } from '../errors.js';

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const LOG_FORMATS = ['human', 'json'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** What an event carries besides its name and message: numbers, strings, booleans, or flat records of them. */
export type LogFields = Record<string, string | number | boolean | undefined | Record<string, number | string>>;

export interface ProxyLogOptions {
  format?: LogFormat;
  /**
   * The least level written. Default: `info` in the json format; `error` in the human format,
   * so that a proxy started without log options prints what it always printed.
   */
  level?: LogLevel;
  /** Where lines go (default: process.stderr). Each call is one whole line, with its newline. */
  sink?: (line: string) => void;
  /** The clock, for tests (default Date.now). */
  now?: () => number;
}

export class ProxyLog {
  readonly format: LogFormat;
  readonly level: LogLevel;
  private readonly least: number;
  private readonly sink: (line: string) => void;
  private readonly now: () => number;

  constructor(options: ProxyLogOptions = {}) {
    this.format = options.format ?? 'human';
    if (!LOG_FORMATS.includes(this.format))
      throw errors.invalidArgument(`the log format must be one of ${LOG_FORMATS.join(', ')}, got '${this.format}'`);
    this.level = options.level ?? (this.format === 'json' ? 'info' : 'error');
    if (!LOG_LEVELS.includes(this.level))
      throw errors.invalidArgument(`the log level must be one of ${LOG_LEVELS.join(', ')}, got '${this.level}'`);
    this.least = LOG_LEVELS.indexOf(this.level);
    this.sink = options.sink ?? ((line) => process.stderr.write(line));
    this.now = options.now ?? Date.now;
  }

  /** Whether an event of `level` is written (so that callers skip building its fields otherwise). */
  enabled(level: LogLevel): boolean {
    return LOG_LEVELS.indexOf(level) >= this.least;
  }

  /** Writes event `event` at `level`: `msg` for people, `fields` for machines (the json format writes both). */
  event(level: LogLevel, event: string, msg: string, fields: LogFields = {}): void {
    if (!this.enabled(level)) return;
    if (this.format === 'json') {
      const line = { time: new Date(this.now()).toISOString(), level, event, msg, ...fields };
      this.sink(`${JSON.stringify(line)}\n`);
    } else {
      this.sink(`offload proxy: ${level === 'info' || level === 'debug' ? '' : `${level}: `}${msg}\n`);
    }
  }
}
