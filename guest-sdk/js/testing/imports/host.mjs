// The test host's `host` interface: settings, facts, and a log the outcome keeps.
import { current } from '../call.mjs';

export function log(level, message) { current('host.log').logs.push({ level, message }); }
export function settings() { return current('host.settings').settings; }
export function runtime() { return current('host.runtime').runtime; }
export function node() { return current('host.node').node; }
