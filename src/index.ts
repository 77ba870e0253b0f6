export { loadSidecarConfig, sidecarHelp, type SidecarConfig, type Runtime } from './config/sidecar-config.ts'
export { startSidecar, type RunningSidecar, type SidecarOptions } from './sidecar/sidecar.ts'
export * from './errors.ts'
export { verifyWebhook, type VerifyWebhookOptions } from './webhook/webhook-signature.ts'
