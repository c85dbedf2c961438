// The far end of the raw TCP baselines (bench/raw-tcp.ts), run as its own process like a proxy.
// Plain JavaScript, no framing library: one command byte, then for W and R a u32 length (LE).
//   P        -> answers P                       (ping-pong)
//   W n data -> reads n bytes, answers K        (stream to the peer)
//   R n      -> sends n bytes                   (stream from the peer)
// An argument of N > 0: after each message the event loop keeps turning for N us, as the
// runtime's TCP transport does (src/transport/poll-window.ts).
import net from 'node:net';

const pollUs = Number(process.argv[2] ?? 0);
let pollUntil = 0;
let turning = false;
function turn() {
  if (performance.now() < pollUntil) setImmediate(turn);
  else turning = false;
}
function pollFor(micros) {
  if (micros <= 0) return;
  pollUntil = performance.now() + micros / 1000;
  if (turning) return;
  turning = true;
  setImmediate(turn);
}

const server = net.createServer((socket) => {
  socket.setNoDelay(true);
  // Its one client gone (closed, or its process ended without closing it): so is this peer.
  socket.on('close', () => process.exit(0));
  let pending = Buffer.alloc(0);
  let sinking = 0;
  const source = Buffer.alloc(1024 * 1024, 0x5a);
  socket.on('data', (chunk) => {
    pollFor(pollUs);
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    for (;;) {
      if (sinking > 0) {
        const take = Math.min(sinking, pending.length);
        sinking -= take;
        pending = pending.subarray(take);
        if (sinking > 0) return;
        socket.write('K');
        continue;
      }
      if (pending.length === 0) return;
      const command = String.fromCharCode(pending[0]);
      if (command === 'P') {
        pending = pending.subarray(1);
        socket.write('P');
        pollFor(pollUs);
        continue;
      }
      if (pending.length < 5) return;
      const length = pending.readUInt32LE(1);
      pending = pending.subarray(5);
      if (command === 'W') sinking = length;
      else if (command === 'R') {
        for (let sent = 0; sent < length; sent += source.length)
          socket.write(source.subarray(0, Math.min(source.length, length - sent)));
      } else {
        socket.destroy();
        return;
      }
      if (sinking === 0 && command === 'W') socket.write('K');
    }
  });
});
server.listen(0, '127.0.0.1', () => console.log(`listening on 127.0.0.1:${server.address().port}`));
process.on('SIGTERM', () => process.exit(0));
