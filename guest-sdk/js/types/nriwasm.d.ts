// TypeScript definitions of the JavaScript SDK (src/nriwasm.js): what
// `import ... from 'nriwasm'` gives a policy. The world's own types are in
// world.d.ts, generated from wit/. A policy's tsconfig.json maps
// 'nriwasm' here (see template/tsconfig.json).

import type {
  ContainerAdjustment, ContainerEviction, ContainerMeta, ContainerUpdate, Container, EventKind, Event as WholeEvent,
  EventInterface, HostInterface, KeyValue, LinuxDevice, LinuxResources, LogLevel, NodeInterface, PodMeta,
  PodSandbox, Reply, StateInterface, WorldExports,
} from './world';

export * from './world';
/** The whole event as one value (the world's `event` variant). */
export type { WholeEvent };

/** The engine the bundle was built for. */
export const ENGINE: 'quickjs' | 'spidermonkey';
/** Every event kind, in the world's order. */
export const EVENT_KINDS: readonly EventKind[];
/** The OCI hook stages, as `Hooks` names them. */
export const HOOK_STAGES: readonly HookStage[];
export type HookStage = 'prestart' | 'createRuntime' | 'createContainer' | 'startContainer' | 'poststart' | 'poststop';

/** The world's interfaces, with values in the SDK's form. */
export const host: HostInterface;
export const node: NodeInterface;
export const state: StateInterface;
/** The event interface itself; handlers get an `Event` that reads it once per part. */
export const rawEvent: EventInterface;

/** An error result of the host (e.g. a refused state write); `payload` is the error value. */
export class WitError extends Error {
  payload: unknown;
}

/** A handler's answer that denies the event; also throwable. */
export class Denial {
  constructor(reason: string);
  reason: string;
}
/** Denies the event with `reason` (return it, or throw it). */
export function deny(reason: string): Denial;

/** The parts of a reply; every one may be left out. */
export interface ReplyParts {
  adjust?: Adjustment | ContainerAdjustment;
  update?: ContainerUpdate[];
  evict?: ContainerEviction[];
}
/** The empty reply: it changes nothing. */
export function none(): Reply;
/** A reply from its parts. */
export function reply(parts?: ReplyParts): Reply;
/** A reply that adjusts the container being created. */
export function adjust(adjustment: Adjustment | ContainerAdjustment): Reply;
/** An update of another container's resources. */
export function update(containerId: string, resources: LinuxResources, ignoreFailure?: boolean): ContainerUpdate;
/** An eviction of a container. */
export function evict(containerId: string, reason: string): ContainerEviction;
/** Empty Linux resources, to fill in. */
export function resources(): LinuxResources;

export interface MountSpec {
  destination: string;
  type?: string;
  source?: string;
  options?: string[];
}
export interface HookSpec {
  path: string;
  args?: string[];
  env?: string[];
  timeout?: number;
}

/** Builds a container adjustment; every method returns the adjustment. */
export class Adjustment {
  /** What is set so far (the methods add to these). */
  annotations: KeyValue[];
  mounts: ContainerAdjustment['mounts'];
  env: KeyValue[];
  hooks: ContainerAdjustment['hooks'];
  linux: ContainerAdjustment['linux'];
  rlimits: ContainerAdjustment['rlimits'];
  cdiDevices: string[];
  args: string[];
  isEmpty(): boolean;
  setAnnotation(key: string, value: string): this;
  removeAnnotation(key: string): this;
  setEnv(name: string, value: string): this;
  removeEnv(name: string): this;
  addMount(mount: MountSpec): this;
  removeMount(destination: string): this;
  setRlimit(type: string, soft: number, hard: number): this;
  addCdiDevice(name: string): this;
  setArgs(args: string[]): this;
  addHook(stage: HookStage, hook: HookSpec): this;
  addDevice(device: LinuxDevice): this;
  setMemoryLimit(bytes: number): this;
  setCpuShares(shares: number): this;
  setCpuQuota(quota: number, period: number): this;
  setCpuset(cpus: string): this;
  setPidsLimit(limit: number): this;
  setOomScoreAdj(value: number): this;
  setUnified(file: string, value: string): this;
  setSysctl(key: string, value: string): this;
  /** The Linux part of the adjustment, created on first use. */
  linuxPart(): NonNullable<ContainerAdjustment['linux']>;
  /** The resources of the adjustment, created on first use. */
  resources(): LinuxResources;
  /** The adjustment as the world's record. */
  build(): ContainerAdjustment;
  /** A reply with this adjustment, or the empty reply if it changes nothing. */
  reply(): Reply;
}

/** The value of `key` in a list of key-value pairs, or undefined. */
export function lookup(list: KeyValue[], key: string): string | undefined;

/** The event a handler handles, read from the host on demand (each part once). */
export class Event {
  readonly kind: EventKind;
  whole(): WholeEvent;
  pod(): PodSandbox | undefined;
  container(): Container | undefined;
  podMeta(): PodMeta | undefined;
  containerMeta(): ContainerMeta | undefined;
  podLabel(key: string): string | undefined;
  podAnnotation(key: string): string | undefined;
  containerLabel(key: string): string | undefined;
  containerAnnotation(key: string): string | undefined;
  envVar(name: string): string | undefined;
  podLabels(): KeyValue[];
  podAnnotations(): KeyValue[];
  containerLabels(): KeyValue[];
  containerAnnotations(): KeyValue[];
  env(): string[];
  resources(): LinuxResources | undefined;
  requestedResources(): LinuxResources | undefined;
  memoryLimit(): number | undefined;
}

/** The settings text (what init checked). */
export function settings(): string;
/** Thrown for settings a policy cannot use; the message starts "invalid settings: ". */
export class SettingsError extends Error {
  constructor(message: string);
}
/** The settings as JSON (empty: `{}`); with `known`, other keys are refused. */
export function settingsJson(text?: string, known?: string[]): Record<string, unknown>;
/** Writes a line to the host's log. */
export function log(level: LogLevel, message: string): void;
/** Splits a comma-separated text into trimmed, non-empty items. */
export function list(text: string): string[];

/** What a handler may answer. */
export type Answer = Reply | Adjustment | Denial | undefined;
export type Handler = (event: Event) => Answer;
export interface PolicySpec {
  /** Checks the settings at load: throwing (or returning a string) refuses them. */
  init?(settings: string): void | string | Denial;
  /** A handler per event kind the policy subscribes to. */
  on: Partial<Record<EventKind, Handler>>;
}
/** The world's exports for a policy. */
export function policy(spec: PolicySpec): WorldExports;
