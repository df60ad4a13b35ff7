// The JSON client the end-to-end tests call the service with: real HTTP to the built bundle, a Bearer
// token and extra headers when given, and the answer's status with its parsed body (undefined when empty).

export interface ApiCall {
  method?: string;
  token?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

// Tests read whatever shape each route answers; the response contract itself is checked elsewhere.
export interface ApiAnswer { status: number; json: any }

export async function callApi(baseUrl: string, path: string, call: ApiCall = {}): Promise<ApiAnswer> {
  const headers: Record<string, string> = { ...call.headers };
  if (call.body !== undefined) headers["content-type"] = "application/json";
  if (call.token) headers.authorization = `Bearer ${call.token}`;
  const response = await fetch(`${baseUrl}${path}`, {
    method: call.method ?? "GET",
    headers,
    body: call.body === undefined ? undefined : JSON.stringify(call.body),
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : undefined };
}

/** A name no other test run has used: site ids, e-mail local parts, device names. */
export const unique = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
