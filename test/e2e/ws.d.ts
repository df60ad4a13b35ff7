// The few parts of the `ws` package (a devDependency, shipped without types) the end-to-end tests and
// the emulator's channel mode (emulator/channel.ts) use.
declare module "ws" {
  import { EventEmitter } from "node:events";
  import type { IncomingMessage } from "node:http";

  export default class WebSocket extends EventEmitter {
    constructor(address: string, options?: { headers?: Record<string, string>; handshakeTimeout?: number });
    static readonly CONNECTING: 0;
    static readonly OPEN: 1;
    static readonly CLOSING: 2;
    static readonly CLOSED: 3;
    readonly readyState: 0 | 1 | 2 | 3;
    send(data: string): void;
    close(code?: number, reason?: string): void;
    terminate(): void;
    on(event: "open", listener: () => void): this;
    on(event: "message", listener: (data: Buffer, isBinary: boolean) => void): this;
    on(event: "close", listener: (code: number, reason: Buffer) => void): this;
    on(event: "error", listener: (error: Error) => void): this;
    on(event: "unexpected-response", listener: (request: unknown, response: IncomingMessage) => void): this;
    once(event: "open", listener: () => void): this;
    once(event: "close", listener: (code: number, reason: Buffer) => void): this;
    once(event: "error", listener: (error: Error) => void): this;
    once(event: "unexpected-response", listener: (request: unknown, response: IncomingMessage) => void): this;
  }
}
