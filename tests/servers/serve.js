// Starts one of the real test servers on a port the kernel picks and prints
// "listening HOST:PORT" once it accepts connections (tests read that line).
//   node serve.js http ROOT        http-server over ROOT (Range requests)
//   node serve.js s3 DIR [BUCKET...] s3rver keeping its buckets in DIR,
//                                  creating the BUCKETs named
'use strict';
const [kind, dir, ...buckets] = process.argv.slice(2);
const host = process.env.LISTEN_HOST || '127.0.0.1';  // benchmarks serve other hosts
if (kind === 'http') {
  const httpServer = require('http-server');
  const server = httpServer.createServer({ root: dir, cache: -1, showDir: false, logFn: null });
  server.listen(0, host, () => {
    console.log(`listening ${host}:${server.server.address().port}`);
  });
} else if (kind === 's3') {
  const S3rver = require('s3rver');
  const configureBuckets = buckets.map((name) => ({ name, configs: [] }));
  new S3rver({ port: 0, address: host, directory: dir, silent: true, configureBuckets })
    .run()
    .then(({ port }) => console.log(`listening ${host}:${port}`));
} else {
  console.error('usage: node serve.js http ROOT | s3 DIR');
  process.exit(2);
}
