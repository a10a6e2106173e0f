// A TCP relay that holds every chunk a client sends for DELAY_MS before
// passing it on: each request then waits DELAY_MS more for its answer, as
// over a link with that much more round-trip time (for benchmarks where the
// kernel has no netem). Answers flow back undelayed. Prints
// "listening HOST:PORT".
//   node delay.js UPSTREAM_HOST:PORT DELAY_MS
'use strict';
const net = require('net');
const [upstream, delayArg] = process.argv.slice(2);
const [upHost, upPort] = upstream.split(':');
const delay = Number(delayArg);
if (!upPort || !(delay >= 0)) {
  console.error('usage: node delay.js UPSTREAM_HOST:PORT DELAY_MS');
  process.exit(2);
}
const server = net.createServer((client) => {
  const up = net.connect(Number(upPort), upHost);
  client.setNoDelay(true);
  up.setNoDelay(true);
  client.on('data', (chunk) => setTimeout(() => up.write(chunk), delay));
  up.pipe(client);
  const end = () => { client.destroy(); up.destroy(); };
  client.on('error', end);
  up.on('error', end);
  client.on('close', () => setTimeout(() => up.destroy(), delay));
  up.on('close', () => client.end());
});
server.listen(0, process.env.LISTEN_HOST || '127.0.0.1', () => {
  const a = server.address();
  console.log(`listening ${a.address}:${a.port}`);
});
