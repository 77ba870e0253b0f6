/**
 * A run id as the sidecar accepts it from a caller and as receivers check it: no `.`, so the
 * signed string `<run_id>.<timestamp>.<body>` splits one way only; bounded, so it fits a header.
 */
const RUN_ID_RULE = /^[A-Za-z0-9_-]{1,128}$/

/** Whether `value` is a string matching the run-id rule. */
export function isRunId (value: unknown): value is string {
  return typeof value === 'string' && RUN_ID_RULE.test(value)
}
