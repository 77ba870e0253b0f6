/**
 * `Server-Timing` of an answer the app gave (SPEC: Tracing): `queue`, the call's wait for a slot;
 * and `app`, the app's time, where the headers go out after its last byte (the cortex envelope).
 * Durations in ms.
 */
export function serverTiming (queueMs: number, appMs?: number): string {
  return appMs === undefined ? `queue;dur=${queueMs}` : `queue;dur=${queueMs}, app;dur=${appMs}`
}
