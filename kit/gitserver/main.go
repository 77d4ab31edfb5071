// gitserver: a git server speaking git's smart HTTP protocol, standing in for
// a platform repository in devstack's cluster tests (`gitops.source: git`).
// Runs `git http-backend` through net/http/cgi for the bare repositories under
// -root (default /srv/git) on -addr (default :8080): every repository is
// exported and accepts pushes without authentication, and a push to a
// repository that does not exist yet creates it (bare, branch main). Logs one
// line per request to stdout:
//
//	METHOD PATH STATUS
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

type recorder struct {
	http.ResponseWriter
	status int
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
	return r.ResponseWriter.Write(b)
}

// repoOf is the repository directory a request names ("/team/app.git/info/refs"
// -> "team/app.git"), or "" when it names none.
func repoOf(urlPath string) string {
	clean := path.Clean("/" + urlPath)
	at := strings.Index(clean, ".git/")
	if at < 0 {
		return ""
	}
	return strings.TrimPrefix(clean[:at+len(".git")], "/")
}

type server struct {
	root    string
	backend *cgi.Handler
	// Serialises creating repositories: two first pushes must not both init.
	creating sync.Mutex
}

// ensureRepo creates the bare repository a first push names.
func (s *server) ensureRepo(repo string) error {
	s.creating.Lock()
	defer s.creating.Unlock()
	dir := filepath.Join(s.root, filepath.FromSlash(repo))
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
		return nil
	}
	out, err := exec.Command("git", "init", "--quiet", "--bare", "--initial-branch=main", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("git init --bare %s: %v: %s", dir, err, out)
	}
	return nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	repo := repoOf(req.URL.Path)
	if repo == "" {
		http.NotFound(w, req)
		return
	}
	pushing := req.URL.Query().Get("service") == "git-receive-pack" ||
		strings.HasSuffix(req.URL.Path, "/git-receive-pack")
	if pushing {
		if err := s.ensureRepo(repo); err != nil {
			log.Print(err)
			http.Error(w, "cannot create the repository", http.StatusInternalServerError)
			return
		}
	}
	s.backend.ServeHTTP(w, req)
}

func main() {
	root := flag.String("root", "/srv/git", "directory of the bare repositories")
	addr := flag.String("addr", ":8080", "listen address")
	backend := flag.String("backend", "/usr/lib/git-core/git-http-backend", "git http-backend program")
	flag.Parse()
	s := &server{
		root: *root,
		backend: &cgi.Handler{
			Path: *backend,
			Dir:  *root,
			Env: []string{
				"GIT_PROJECT_ROOT=" + *root,
				"GIT_HTTP_EXPORT_ALL=1",
				// Pushes without authentication: http-backend refuses them unless told.
				"GIT_CONFIG_COUNT=1",
				"GIT_CONFIG_KEY_0=http.receivepack",
				"GIT_CONFIG_VALUE_0=true",
			},
			InheritEnv: []string{"PATH", "HOME"},
		},
	}
	out := log.New(os.Stdout, "", 0)
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := &recorder{ResponseWriter: w}
		s.ServeHTTP(rec, req)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		out.Printf("%s %s %d", req.Method, req.URL.Path, rec.status)
	})
	fmt.Fprintf(os.Stderr, "gitserver: serving %s on %s\n", *root, *addr)
	log.Fatal(http.ListenAndServe(*addr, handler))
}
