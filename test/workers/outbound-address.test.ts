import { describe, expect, it } from "vitest";
import { hostProblem, tcpDestinationProblem, webhookUrlProblem } from "../../src/shared/outbound-address";

const strict = { allowLoopback: false };
const loopbackAllowed = { allowLoopback: true };

describe("outbound destinations", () => {
  it("accepts HTTPS to public hosts and public address literals", () => {
    for (const url of ["https://hooks.example.com/fleet", "https://hooks.example.com:8443/x?y=1", "https://8.8.8.8/hook", "https://[2606:4700::1111]/hook"]) {
      expect(webhookUrlProblem(url, strict), url).toBeUndefined();
    }
  });

  it("refuses other schemes, credentials and unreadable URLs", () => {
    expect(webhookUrlProblem("http://hooks.example.com/", strict)).toMatch(/https/);
    expect(webhookUrlProblem("ftp://hooks.example.com/", strict)).toMatch(/https/);
    expect(webhookUrlProblem("https://user:pw@hooks.example.com/", strict)).toMatch(/credentials/);
    expect(webhookUrlProblem("not a url", strict)).toMatch(/not a URL/);
  });

  it("refuses loopback, private, link-local, CGNAT, multicast, reserved and metadata addresses, in every spelling", () => {
    const refused = [
      "https://127.0.0.1/", "https://127.1/", "https://2130706433/", "https://0x7f000001/", "https://0177.0.0.1/",
      "https://10.1.2.3/", "https://172.16.0.1/", "https://172.31.255.255/", "https://192.168.1.1/",
      "https://169.254.169.254/latest/meta-data/", "https://100.64.0.1/", "https://100.100.100.200/",
      "https://224.0.0.1/", "https://239.255.255.250/", "https://255.255.255.255/", "https://0.0.0.0/", "https://240.0.0.1/",
      "https://[::1]/", "https://[::]/", "https://[fe80::1]/", "https://[fc00::1]/", "https://[fd00:ec2::254]/", "https://[ff02::1]/",
      "https://[::ffff:127.0.0.1]/", "https://[::ffff:10.0.0.1]/", "https://[64:ff9b::a9fe:a9fe]/",
    ];
    for (const url of refused) expect(webhookUrlProblem(url, strict), url).toBeDefined();
  });

  it("refuses obviously internal names", () => {
    for (const host of ["localhost", "LOCALHOST.", "api.localhost", "printer.local", "metadata.google.internal", "nas.lan", "router.home.arpa", "intranet"]) {
      expect(hostProblem(host), host).toBeDefined();
    }
    expect(hostProblem("hooks.example.com")).toBeUndefined();
  });

  it("lets the test-only setting through to loopback only, over http or tcp", () => {
    expect(webhookUrlProblem("http://127.0.0.1:9999/hook", loopbackAllowed)).toBeUndefined();
    expect(webhookUrlProblem("http://127.0.0.1:9999/hook", strict)).toBeDefined();
    expect(webhookUrlProblem("https://10.0.0.5/hook", loopbackAllowed)).toBeDefined();
    expect(webhookUrlProblem("http://192.168.1.10/hook", loopbackAllowed)).toBeDefined();
    expect(tcpDestinationProblem("127.0.0.1", 6514, loopbackAllowed)).toBeUndefined();
    expect(tcpDestinationProblem("127.0.0.1", 6514, strict)).toBeDefined();
    expect(tcpDestinationProblem("10.0.0.1", 514, loopbackAllowed)).toBeDefined();
    expect(tcpDestinationProblem("syslog.example.com", 6514, strict)).toBeUndefined();
    expect(tcpDestinationProblem("syslog.example.com", 70000, strict)).toMatch(/port/);
    expect(tcpDestinationProblem("fe80::1", 514, strict)).toBeDefined();
  });
});
