"""Python's own HTTP server (http.server, from the standard library) over
ROOT: it answers every GET with the whole file, ignoring Range requests, as
HTTP allows and as `python3 -m http.server` does when people serve shards
with it. Prints "listening HOST:PORT" once it accepts connections.

    python3 plain_http.py ROOT
"""
import functools
import http.server
import os
import sys


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main():
    root = sys.argv[1]
    host = os.environ.get("LISTEN_HOST", "127.0.0.1")
    handler = functools.partial(QuietHandler, directory=root)
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    print(f"listening {host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
