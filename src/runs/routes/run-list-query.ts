import { MalformedRequestError } from '../../errors.ts'
import { isRunId } from '../../shared/run-id-rule.ts'
import type { ListPosition, ListRequest } from '../store/run-listing.ts'
import type { RunStatus } from '../run-data.ts'

/** Every status, in the order a filter is written in a cursor. */
const STATUSES: readonly RunStatus[] = ['queued', 'running', 'succeeded', 'failed', 'canceled']
const DEFAULT_LIMIT = 100
const MAX_LIMIT = 1000

const BAD_STATUS = `status must be one or more of ${STATUSES.join(', ')}, separated by commas`
const BAD_LIMIT = `limit must be a whole number from 1 to ${MAX_LIMIT}`
const BAD_CURSOR = 'malformed cursor'

/** What a cursor carries: the filter it was made for and the last run of the page before. */
interface CursorJson { s: string, t: number, id: string }

/**
 * `GET …/_runs?status=&limit=&cursor=` → the page asked for; 400 (MalformedRequestError) for a
 * bad status, limit or cursor, or a status other than the one the cursor carries.
 */
export function parseListQuery (query: string): ListRequest {
  const params = new URLSearchParams(query)
  const status = statusParam(params)
  const limitText = single(params, 'limit')
  const cursorText = single(params, 'cursor')
  const statuses = status === undefined ? undefined : parseStatuses(status)
  let limit = DEFAULT_LIMIT
  if (limitText !== undefined) {
    limit = /^\d{1,4}$/.test(limitText) ? Number(limitText) : 0
    if (limit < 1 || limit > MAX_LIMIT) throw new MalformedRequestError(BAD_LIMIT)
  }
  if (cursorText === undefined) return { statuses, after: undefined, limit }
  const cursor = parseCursor(cursorText)
  // the cursor carries the filter: a status given with it must be the same one
  if (status !== undefined && filterText(statuses) !== filterText(cursor.statuses)) throw new MalformedRequestError('cursor was made for another status filter')
  return { ...cursor, limit }
}

/** `DELETE …/_runs?status=queued`: anything else is 400. */
export function checkPurgeQuery (query: string): void {
  const status = statusParam(new URLSearchParams(query))
  if (status === undefined || !/^queued(,queued)*$/.test(status)) throw new MalformedRequestError('DELETE …/_runs needs status=queued: only queued runs are purged')
}

/** The cursor of the page after `last`, for the same filter. */
export function cursorOf (statuses: readonly RunStatus[] | undefined, last: ListPosition): string {
  const json: CursorJson = { s: filterText(statuses), t: last.createdAt, id: last.runId }
  return Buffer.from(JSON.stringify(json)).toString('base64url')
}

/** `status`, given once or more (`status=a&status=b` is `status=a,b`). */
function statusParam (params: URLSearchParams): string | undefined {
  const values = params.getAll('status')
  return values.length === 0 ? undefined : values.join(',')
}

function single (params: URLSearchParams, name: string): string | undefined {
  const values = params.getAll(name)
  if (values.length > 1) throw new MalformedRequestError(`${name} given more than once`)
  return values[0]
}

/** The statuses of `s1,s2,…`, in STATUSES' order, each once. */
function parseStatuses (text: string): readonly RunStatus[] {
  const named = text.split(',')
  if (named.some(status => !(STATUSES as readonly string[]).includes(status))) throw new MalformedRequestError(BAD_STATUS)
  return STATUSES.filter(status => named.includes(status))
}

const filterText = (statuses: readonly RunStatus[] | undefined): string => statuses?.join(',') ?? ''

function parseCursor (text: string): { statuses: readonly RunStatus[] | undefined, after: ListPosition } {
  let json: Partial<CursorJson>
  try {
    if (!/^[A-Za-z0-9_-]+$/.test(text)) throw new Error('not base64url')
    json = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as Partial<CursorJson>
  } catch {
    throw new MalformedRequestError(BAD_CURSOR)
  }
  if (json === null || typeof json !== 'object' || typeof json.s !== 'string' || !Number.isSafeInteger(json.t) || (json.t as number) < 0 ||
      typeof json.id !== 'string' || !isRunId(json.id)) throw new MalformedRequestError(BAD_CURSOR)
  let statuses: readonly RunStatus[] | undefined
  try {
    statuses = json.s === '' ? undefined : parseStatuses(json.s)
  } catch {
    throw new MalformedRequestError(BAD_CURSOR)
  }
  return { statuses, after: { createdAt: json.t as number, runId: json.id } }
}
