/** `relative` resolved under `url`'s path (`STORE_URL` http://h/base + `v2/x` → http://h/base/v2/x). */
export const underUrl = (url: URL, relative: string): URL => new URL(`${pathPrefix(url)}/${relative}`, url)

/** A URL's path as a prefix to put before `/…` paths: without its trailing slash ('' for the root). */
export const pathPrefix = (url: URL): string => url.pathname.endsWith('/') ? url.pathname.slice(0, -1) : url.pathname
