// `k3 serve` as a child process for the node:test suites of this folder (K3_CLI names the binary):
// started on a free port with an API key, ready once it prints its URL, stopped with SIGTERM.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

export const K3 = process.env.K3_CLI;
export const KEY = 'test-key';

// Starts `k3 serve` and resolves `url` with its base URL once the ready line is printed.
export function startServer(model, extra = []) {
  const child = spawn(K3, ['serve', '--model', model, '--port', '0', '--threads', '2', '--api-key', KEY, ...extra], {
    stdio: ['ignore', 'pipe', 'pipe'],
    // Sleeping OpenMP waits: spinning workers starve each other on a loaded machine.
    env: { OMP_WAIT_POLICY: 'passive', ...process.env },
  });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const url = new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/ready at (http:\/\/\S+\/v1)/);
      if (m) resolve(m[1]);
    });
    exited.then(({ code }) => reject(new Error(`k3 serve exited ${code}: ${stderr}`)));
  });
  url.catch(() => {});
  return { child, url, exited, stderr: () => stderr };
}

// Sends SIGTERM and expects exit code 0; resolves with the seconds the exit took.
export async function stopServer(server) {
  const t0 = performance.now();
  server.child.kill('SIGTERM');
  const { code, signal } = await server.exited;
  assert.equal(code, 0, `k3 serve did not exit 0 after SIGTERM (signal ${signal}): ${server.stderr().slice(-2000)}`);
  return (performance.now() - t0) / 1000;
}
