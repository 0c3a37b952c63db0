// A webhook receiver that verifies each request with the standardwebhooks
// npm package (installed by the test that runs it), as a receiver written
// from the package's README would. It prints {"listening": PORT} once, then
// one JSON line per request: {"ok": true, "id", "body"} for a verified
// request (answered 204), {"ok": false, "error"} otherwise (answered 401).
// The secret comes from the environment variable SECRET.
"use strict";
const http = require("node:http");
const { Webhook } = require("standardwebhooks");

const wh = new Webhook(process.env.SECRET);
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    try {
      const payload = wh.verify(body, req.headers);
      console.log(JSON.stringify({ ok: true, id: req.headers["webhook-id"], body: payload }));
      res.writeHead(204).end();
    } catch (e) {
      console.log(JSON.stringify({ ok: false, error: String(e && e.message) }));
      res.writeHead(401).end();
    }
  });
});
server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ listening: server.address().port }));
});
