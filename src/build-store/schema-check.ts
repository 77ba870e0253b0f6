import { FormatRegistry, type TSchema, type Static } from '@sinclair/typebox'
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler'
import { ValueErrorType } from '@sinclair/typebox/errors'
import { InvalidBodyError } from '../errors.ts'

/** RFC 3339 date-time with a time zone, as `format: date-time` means in JSON Schema. */
const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i

/** True for an RFC 3339 date-time that names a real instant (no 30 February, no hour 25). */
export function isDateTime (value: string): boolean {
  if (!DATE_TIME.test(value) || Number.isNaN(Date.parse(value))) return false
  const [year, month, day] = value.slice(0, 10).split('-').map(Number) as [number, number, number]
  return new Date(Date.UTC(year, month - 1, day)).getUTCDate() === day
}

if (!FormatRegistry.Has('date-time')) FormatRegistry.Set('date-time', isDateTime)

/** A compiled validator whose `parse` throws a 400 naming the first bad field. */
export interface BodyCheck<S extends TSchema> {
  readonly schema: S
  /** Returns `value` typed when it matches the schema; else throws InvalidBodyError. */
  parse: (value: unknown) => Static<S>
}

/** Compiles `schema` once (at start), for `what` ("build", "service account") in messages. */
export function compileBodyCheck<S extends TSchema> (schema: S, what: string): BodyCheck<S> {
  const check: TypeCheck<S> = TypeCompiler.Compile(schema)
  return {
    schema,
    parse: value => {
      if (check.Check(value)) return value
      const error = check.Errors(value).First()
      throw new InvalidBodyError(`invalid ${what}: ${error === undefined ? 'does not match its schema' : describe(error.type, error.path, error.schema, error.message)}`)
    }
  }
}

function describe (type: ValueErrorType, path: string, schema: TSchema, message: string): string {
  const field = path.slice(1).replaceAll('/', '.')
  if (path === '') return `the body must be a JSON object (${message.toLowerCase()})`
  if (type === ValueErrorType.ObjectAdditionalProperties) return `unknown field "${field}"`
  if (type === ValueErrorType.Union && Array.isArray(schema.anyOf)) {
    const choices = (schema.anyOf as TSchema[]).map(choice => String(choice.const))
    return `${field}: expected one of ${choices.join(', ')}`
  }
  return `${field}: ${message.charAt(0).toLowerCase()}${message.slice(1)}`
}
