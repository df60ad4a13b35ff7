/**
 * What a site's hub erases of a device that leaves it for good: on a transfer its metrics and
 * simulated-agent history (the device starts afresh in its new site), on a purge its commands as
 * well. Open commands are cancelled before anything here runs, so their ends are audited.
 */

export function eraseDeviceHistory(sql: SqlStorage, deviceId: string) {
  sql.exec("DELETE FROM metrics_history WHERE device_id = ?", deviceId);
  sql.exec("DELETE FROM metrics_state WHERE device_id = ?", deviceId);
  sql.exec("DELETE FROM agent_events WHERE device_id = ?", deviceId);
  sql.exec("DELETE FROM agents WHERE device_id = ?", deviceId);
}

export function eraseDeviceCommands(sql: SqlStorage, deviceId: string) {
  sql.exec("DELETE FROM commands WHERE device_id = ?", deviceId);
}
