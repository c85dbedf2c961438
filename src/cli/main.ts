#!/usr/bin/env node
/**
 * The `offload` command: runs the command named by the first argument and turns its outcome into
 * the exit status (0 done, 1 failed or an OffloadError, 2 used wrongly).
 */
import { readFile } from 'node:fs/promises';
import { OffloadError } from '../errors.js';
import * as bench from './bench.js';
import * as build from './build.js';
import * as demo from './demo.js';
import * as devices from './devices.js';
import * as init from './init.js';
import * as launch from './launch.js';
import * as proxy from './proxy.js';
import * as serve from './serve.js';
import { table, usageError, wrapHelp } from './format.js';

/** Each module exports `summary` (one line) and `run(args)`, which resolves to the exit status. */
const COMMANDS = { init, devices, build, demo, serve, proxy, launch, bench };
type CommandName = keyof typeof COMMANDS;

const HELP = wrapHelp(`Usage: offload <command> [options]

Commands:
${table([
  ...Object.entries(COMMANDS).map(([name, command]) => [`  ${name}`, command.summary]),
  ['  help [command]', 'Show this list, or the help of a command'],
]).join('\n')}

Run 'offload <command> --help' for the options of a command,
'offload --version' for the version of offload-ts.`);

/** The package's version, from its package.json (src/cli and dist/cli sit two levels below it). */
async function version(): Promise<string> {
  const manifest = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as {
    name: string;
    version: string;
  };
  return `${manifest.name} ${manifest.version}`;
}

function isCommand(name: string): name is CommandName {
  return Object.hasOwn(COMMANDS, name);
}

/** node:util parseArgs reports bad flags with these codes. */
function isParseError(error: unknown): error is Error {
  return error instanceof Error && String((error as NodeJS.ErrnoException).code).startsWith('ERR_PARSE_ARGS_');
}

async function dispatch(name: string, args: string[]): Promise<number> {
  if (!isCommand(name))
    return usageError('', `unknown command '${name}' (commands: ${Object.keys(COMMANDS).join(', ')})`);
  try {
    return await COMMANDS[name].run(args);
  } catch (error) {
    if (error instanceof OffloadError) {
      console.error(`offload: error [${error.code}]: ${error.message}`);
      return 1;
    }
    if (isParseError(error)) return usageError(name, error.message);
    throw error;
  }
}

async function main(args: string[]): Promise<number> {
  const [name, ...rest] = args;
  if (name === undefined) {
    // No command is a usage error, as for git or npm: the usage, then status 2 for scripts.
    console.error(HELP);
    return 2;
  }
  if (name === '--help' || name === '-h' || (name === 'help' && rest.length === 0)) {
    console.log(HELP);
    return 0;
  }
  if (name === '--version' || name === '-v' || name === 'version') {
    console.log(await version());
    return 0;
  }
  if (name === 'help') return dispatch(rest[0]!, ['--help']);
  return dispatch(name, rest);
}

process.exitCode = await main(process.argv.slice(2));
