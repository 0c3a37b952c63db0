package loadbench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// nginx is an nginx process in front of a backend, limiting requests with limit_req.
type nginx struct {
	cmd *exec.Cmd
	dir string
	url string
}

// startNginx starts nginx in the foreground (no daemon, no master process) with a
// configuration written to a temporary directory: a loopback port, limit_req at rate per
// second with burst and nodelay, answering 429 (without Retry-After) over the limit and
// proxying the rest to backend with keep-alive. Its access log records the time, status
// and connection serial number of every request.
func startNginx(ctx context.Context, program, backend string, rate float64, burst int) (*nginx, error) {
	dir, err := os.MkdirTemp("", "redrive-nginx-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  log_format bench '$msec $status $connection';
  access_log %[1]s/access.log bench buffer=256k flush=1s;
  keepalive_requests 100000;
  limit_req_zone $server_addr zone=api:1m rate=%[2]dr/s;
  limit_req_status 429;
  upstream backend { server %[3]s; keepalive 64; }
  server {
    listen %[4]s;
    location / {
      limit_req zone=api burst=%[5]d nodelay;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://backend;
    }
  }
}
`, dir, int(rate), strings.TrimPrefix(backend, "http://"), addr, burst)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(program, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log"))
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	n := &nginx{cmd: cmd, dir: dir, url: "http://" + addr}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return n, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.stop()
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return nil, fmt.Errorf("nginx did not listen on %s: %s", addr, strings.TrimSpace(string(b)))
		}
		wait(ctx, 50*time.Millisecond)
	}
}

// stop ends nginx (SIGQUIT: finish and flush the access log) and waits for it.
func (n *nginx) stop() {
	_ = n.cmd.Process.Signal(quitSignal)
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-done
	}
}

// windows reads the access log into windows of width from start, and counts the
// connections it names.
func (n *nginx) windows(start time.Time, width time.Duration) ([]Window, int, error) {
	f, err := os.Open(filepath.Join(n.dir, "access.log"))
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	rec := NewRecorder(start, width)
	conns := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			continue
		}
		sec, err1 := strconv.ParseFloat(fs[0], 64)
		status, err2 := strconv.Atoi(fs[1])
		if err1 != nil || err2 != nil {
			return nil, 0, fmt.Errorf("nginx access log: bad line %q", sc.Text())
		}
		at := time.Unix(0, int64(sec*1e9))
		if at.Before(start) {
			continue
		}
		rec.Arrive(at, "")
		rec.Answer(at, status)
		conns[fs[2]] = true
	}
	return rec.Windows(), len(conns), sc.Err()
}

// runNginxVariant runs a variant against nginx in front of an unlimited backend.
func runNginxVariant(ctx context.Context, o OverloadOptions, v string) (Result, error) {
	backend, err := StartServer(ServerOptions{})
	if err != nil {
		return Result{}, err
	}
	defer backend.Close()
	ng, err := startNginx(ctx, o.Nginx, backend.URL, o.Rate, o.Burst)
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(ng.dir)
	stopped := false
	defer func() {
		if !stopped {
			ng.stop()
		}
	}()
	r := Result{Name: v, Items: o.Items, Workers: o.Workers, Capacity: o.Rate, Width: 100 * time.Millisecond}
	start := time.Now()
	vctx, cancel := context.WithTimeout(ctx, o.Limit)
	defer cancel()
	url := ng.url + "/v1/complete"
	var c counts
	switch v {
	case VariantNginxNaive:
		c, err = runNaive(vctx, url, o.Items, o.Workers)
	case VariantNginxEngine:
		c, err = runEngine(vctx, url, o.Items, o.Workers)
	case VariantNginxRunner:
		c, err = runRunner(vctx, o.Exe, url, o.Items, o.Workers)
	}
	if err != nil {
		return r, err
	}
	r.Elapsed = time.Since(start)
	r.Succeeded, r.Dead, r.Canceled, r.Unfinished = c.succeeded, c.dead, c.canceled, o.Items-c.succeeded-c.dead-c.canceled
	ng.stop()
	stopped = true
	r.Windows, r.Conns, err = ng.windows(start, r.Width)
	return r, err
}
