package loadbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"time"
)

// serverReport is what a token-bucket server in its own process (ServeProcess) writes
// when its input closes.
type serverReport struct {
	Windows []Window
	Conns   int
	Stamps  []Stamp
	Stalls  []Stall
}

// serverHello is the first line a server process writes: where it listens and its
// time zero.
type serverHello struct {
	URL   string
	Start int64 // Unix ns
}

// ServeProcess runs a token-bucket server (StartServer with o) in this process for the
// overload benchmark's --server-process mode, so that the stalls of the process under
// test are not the measuring server's: it writes its URL as one JSON line to out,
// serves until in reaches its end, then writes its windows, connections, send stamps
// and its own stalls as JSON to out.
func ServeProcess(ctx context.Context, o ServerOptions, in io.Reader, out io.Writer) error {
	srv, err := StartServer(o)
	if err != nil {
		return err
	}
	defer srv.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch := watchStalls(wctx, srv.Rec.Start, 20*time.Millisecond)
	if err := json.NewEncoder(out).Encode(serverHello{URL: srv.URL, Start: srv.Rec.Start.UnixNano()}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	rep := serverReport{Windows: srv.Rec.Windows(), Conns: srv.Conns(), Stamps: srv.Rec.Stamps(), Stalls: watch.stop(cancel)}
	return json.NewEncoder(out).Encode(rep)
}

// serverProc is a token-bucket server running in its own process.
type serverProc struct {
	URL   string
	Start time.Time
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startServerProc starts `exe bench overload server` with o.
func startServerProc(ctx context.Context, exe string, o ServerOptions) (*serverProc, error) {
	cmd := exec.CommandContext(ctx, exe, "bench", "overload", "server",
		"--rate", strconv.FormatFloat(o.Rate, 'g', -1, 64), "--burst", strconv.Itoa(o.Burst),
		"--retry-after", o.RetryAfter.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server process: %w", err)
	}
	p := &serverProc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	var h serverHello
	line, err := p.out.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &h)
	}
	if err != nil {
		_ = stdin.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("server process: %w", err)
	}
	p.URL, p.Start = h.URL, time.Unix(0, h.Start)
	return p, nil
}

// finish stops the server process and returns what it recorded.
func (p *serverProc) finish() (serverReport, error) {
	_ = p.stdin.Close()
	var rep serverReport
	derr := json.NewDecoder(p.out).Decode(&rep)
	werr := p.cmd.Wait()
	if derr != nil {
		return rep, fmt.Errorf("server process report: %w", derr)
	}
	if werr != nil {
		return rep, fmt.Errorf("server process: %w", werr)
	}
	return rep, nil
}
