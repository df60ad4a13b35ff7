/**
 * The Worker's only way into a CredentialGuard (durable-objects/credential-guard.ts): one object per
 * guarded credential, replies parsed against src/shared/guard-contract.ts.
 */
import type { Env } from "../env";
import { GuardReservationSchema, guardName, type GuardedKind } from "../shared/guard-contract";

export class CredentialGuardClient {
  private readonly stub;

  constructor(env: Env, readonly kind: GuardedKind, readonly id: string) {
    this.stub = env.CREDENTIAL_GUARD.get(env.CREDENTIAL_GUARD.idFromName(guardName(kind, id)));
  }

  async reserve(client: string) {
    return GuardReservationSchema.parse(await this.stub.reserve(client));
  }

  async settle(ticket: string, client: string, verified: boolean) {
    await this.stub.settle(ticket, client, verified);
  }

  /** The credential was replaced: its failures are forgotten. */
  async forget() {
    await this.stub.forget();
  }
}

export const credentialGuard = (env: Env, kind: GuardedKind, id: string) => new CredentialGuardClient(env, kind, id);
