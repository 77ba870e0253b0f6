import { type Static, Type } from '@sinclair/typebox'

/** Every error the store answers. */
export const ErrorBodySchema = Type.Object({
  message: Type.String({ description: 'A human-readable description of the error' })
}, { additionalProperties: false, title: 'Error' })

/** The body of `POST /v2/projects/{project_id}/service-accounts`. */
export const NewServiceAccountSchema = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 200, description: 'A name to recognise the account by' }),
  expiresAt: Type.String({ format: 'date-time', description: 'When its token expires: an ISO 8601 time in the future, with a time zone' })
}, { additionalProperties: false, title: 'NewServiceAccount' })
export type NewServiceAccount = Static<typeof NewServiceAccountSchema>

const serviceAccountFields = {
  id: Type.String({ description: 'The service account id (the token\'s sub)' }),
  name: Type.String(),
  expiresAt: Type.String({ format: 'date-time', description: 'The token\'s exp, ISO 8601 UTC' })
}

/** A service account as listed: never its token. */
export const ServiceAccountSchema = Type.Object({
  ...serviceAccountFields,
  createdAt: Type.String({ format: 'date-time' })
}, { additionalProperties: false, title: 'ServiceAccount' })
export type ServiceAccount = Static<typeof ServiceAccountSchema>

/** The answer to a create: the only time the token is shown. */
export const CreatedServiceAccountSchema = Type.Object({
  ...serviceAccountFields,
  token: Type.String({ description: 'A JWT (EdDSA) for Authorization: Bearer; shown only here' })
}, { additionalProperties: false, title: 'CreatedServiceAccount' })
export type CreatedServiceAccount = Static<typeof CreatedServiceAccountSchema>

export const ServiceAccountListSchema = Type.Object({
  serviceAccounts: Type.Array(ServiceAccountSchema)
}, { additionalProperties: false, title: 'ServiceAccountList' })

export const RevokedTokensSchema = Type.Object({
  revoked: Type.Array(Type.String(), { description: 'The jti of every revoked token not yet expired' })
}, { additionalProperties: false, title: 'RevokedTokens' })

export const JwksSchema = Type.Object({
  keys: Type.Array(Type.Object({
    kty: Type.String(),
    crv: Type.String(),
    x: Type.String(),
    kid: Type.String(),
    alg: Type.Literal('EdDSA'),
    use: Type.Literal('sig')
  }, { additionalProperties: false }))
}, { additionalProperties: false, title: 'JWKS' })

export const HealthSchema = Type.Object({ status: Type.Literal('ok') }, { additionalProperties: false, title: 'Health' })
