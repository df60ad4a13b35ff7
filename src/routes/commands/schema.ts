import { z } from "@hono/zod-openapi";
import { CONFIG_URL_RULE, checkConfigUrls } from "../../lib/config-url";
import { lineText, proseText } from "../../lib/text";
import { COMMAND_STATUSES, DEFAULT_COMMAND_TTL_S as DEFAULT_TTL_S, MAX_COMMAND_TTL_S as MAX_TTL_S, MAX_POLL_WAIT_S as MAX_WAIT_S, normaliseCommandType } from "../../shared/vocabulary";
import { AckBodySchema, CommandRecordSchema } from "../../shared/hub-contract";
import { DeviceParams } from "../devices/schema";

const MAX_PAYLOAD_BYTES = 32 * 1024;

export const CommandIdSchema = z.string().min(1).max(64).regex(/^[A-Za-z0-9-]+$/, "Letters, digits and '-' only");

export const CommandParams = z.object({
  command_id: CommandIdSchema.openapi({ param: { name: "command_id", in: "path" }, example: "0f8fad5b-d9cb-469f-a165-70867728950e" }),
});
export { DeviceParams };
export const DeviceCommandParams = DeviceParams.merge(CommandParams);

/** The command record is the hub contract's: the API shows exactly what the hub keeps. */
export const CommandSchema = CommandRecordSchema;

export const QueueCommandBody = z
  .object({
    command_type: lineText().min(1).max(64)
      .refine((v) => normaliseCommandType(v) !== undefined, "A command type is a name such as restart, shutdown, update_config or ping")
      .openapi({ description: "restart, shutdown, update_config, ping or another type the device understands; REBOOT and UPDATE_CONFIG are accepted in any case", example: "REBOOT" }),
    payload: z.record(z.string(), z.unknown()).optional()
      .openapi({ description: `Command arguments, at most 32 KB. A \`config_url\` anywhere in it must be ${CONFIG_URL_RULE}` })
      .refine((p) => p === undefined || JSON.stringify(p).length <= MAX_PAYLOAD_BYTES, `payload is limited to ${MAX_PAYLOAD_BYTES / 1024} KB`),
    ttl_seconds: z.number().int().min(1).max(MAX_TTL_S).optional()
      .openapi({ description: `Time to live: an open command expires after it (default ${DEFAULT_TTL_S}, max ${MAX_TTL_S})` }),
  })
  .superRefine((b, ctx) => checkConfigUrls(b.payload, ctx, ["payload"]))
  .openapi("QueueCommandRequest");

export const IdempotencyHeaders = z.object({
  "idempotency-key": lineText().min(1).max(255).optional().openapi({
    param: { name: "idempotency-key", in: "header" },
    description: "Repeating a request with the same key for the same device returns the command it created instead of queueing another; the same key with a different body is 422",
  }),
});

export const CommandListQuery = z.object({
  status: z.enum(COMMAND_STATUSES).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

export const CommandList = z
  .object({ commands: z.array(CommandSchema), total: z.number().int(), limit: z.number().int(), offset: z.number().int() })
  .openapi("CommandList");

export const PollQuery = z.object({
  wait: z.coerce.number().min(0).default(0).openapi({
    description: `Long poll: with nothing pending, wait up to this many seconds (at most ${MAX_WAIT_S}; larger values are capped) for a command to be queued`,
    example: 25,
  }),
});

export const PendingCommands = z.object({ commands: z.array(CommandSchema) }).openapi("PendingCommands");

export const AckResponse = AckBodySchema;

export const StatusBody = z
  .object({
    status: lineText().min(1).max(32).openapi({ description: "completed or failed (success and failure are read the same way)", example: "completed" }),
    result: z.unknown().optional().openapi({ description: "Result data (any JSON)" }),
    error_message: proseText().max(4000).nullish(),
    device_id: lineText().max(128).optional().openapi({ description: "When present it must equal X-Device-ID (403 otherwise)" }),
    site_id: lineText().max(64).optional().openapi({ description: "Accepted and ignored" }),
  })
  .openapi("CommandStatusReport");
