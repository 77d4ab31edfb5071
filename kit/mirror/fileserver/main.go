// fileserver: a static HTTP file server standing in for download hosts
// (github.com release assets, raw.githubusercontent.com) in devstack's online
// tests. Serves the files under -root (default /srv) on -addr (default :8080),
// GET and HEAD only, 404 for anything that is not a regular file (no
// directory listings), and logs one line per request to stdout:
//
//	METHOD PATH STATUS BYTES
//
// (BYTES: body bytes sent; 0 for HEAD).
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path"
	"path/filepath"
)

type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func serve(root string, w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := filepath.Join(root, filepath.FromSlash(path.Clean("/"+req.URL.Path)))
	f, err := os.Open(name)
	if err != nil {
		http.NotFound(w, req)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, req)
		return
	}
	// ServeContent: Content-Length, Last-Modified, Range, HEAD without a body.
	http.ServeContent(w, req, st.Name(), st.ModTime(), f)
}

func main() {
	root := flag.String("root", "/srv", "directory to serve")
	addr := flag.String("addr", ":8080", "listen address")
	flag.Parse()
	out := log.New(os.Stdout, "", 0)
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := &recorder{ResponseWriter: w}
		serve(*root, rec, req)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		out.Printf("%s %s %d %d", req.Method, req.URL.Path, rec.status, rec.bytes)
	})
	fmt.Fprintf(os.Stderr, "fileserver: serving %s on %s\n", *root, *addr)
	log.Fatal(http.ListenAndServe(*addr, handler))
}
