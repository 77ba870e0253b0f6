import type { EnvParser } from './env-parsers.ts'

/** One environment variable of a program: how it is read, its default, and its --help row. */
export interface EnvVariable<C, K extends keyof C = keyof C> {
  readonly name: string
  readonly key: K
  /** Shown in --help; `undefined` means unset by default. */
  readonly defaultText: string | undefined
  readonly meaning: string
  readonly parse: EnvParser<C[K]>
  /** The default, computed from the values read before it. */
  readonly fallback: (partial: Partial<C>) => C[K]
}

/** Types one row of a table, so `parse` and `fallback` are checked against the key's type. */
export function envVariable<C> () {
  return <K extends keyof C>(v: EnvVariable<C, K>): EnvVariable<C, K> => v
}

/**
 * Reads every variable of `table` from `env`, in order (a default may depend on the values above
 * it). An empty value counts as unset. Throws the ConfigError of the first invalid variable.
 */
export function loadEnvTable<C> (table: ReadonlyArray<EnvVariable<C, keyof C>>, env: NodeJS.ProcessEnv): C {
  const partial: Partial<C> = {}
  for (const v of table) {
    const raw = env[v.name]
    partial[v.key] = raw === undefined || raw === '' ? v.fallback(partial) : v.parse(v.name, raw)
  }
  return partial as C
}

/** The --help rows of `table`: name, default, meaning, in columns. */
export function envHelpRows<C> (table: ReadonlyArray<EnvVariable<C, keyof C>>, nameWidth: number, defaultWidth: number): string[] {
  return table.map(v => `  ${v.name.padEnd(nameWidth)}${(v.defaultText ?? 'unset').padEnd(defaultWidth)}${v.meaning}`)
}
