package httpapi_test

// The OpenAPI document (openapi.json, served at GET /v1/openapi.json) is
// checked against the real handlers here:
//
//   - TestOpenAPIDocument: it is served as embedded, is OpenAPI 3.1.0, every
//     schema compiles, every $ref resolves, every operation is complete.
//   - TestOpenAPIRoutes: the routes registered in server.go's routes() and by
//     the daemon (server: the stream, /metrics, River UI), read from
//     the source with go/parser, are exactly the documented operations; and
//     every documented operation is answered by a running daemon, which never
//     gives the mux's "no route" 404 or 405 for it.
//   - TestOpenAPIExamples: every example validates against its schema.
//   - TestOpenAPIResponses: a scenario against a running daemon (fan-out,
//     email, stream and all) validates every response, success or error,
//     against the schema documented for its operation and status, and every
//     documented 2xx of every operation is seen at least once.
//
// Set NOTIFYD_OPENAPI_DUMP to a directory to have TestOpenAPIResponses write
// the first real body of each operation and status there (to refresh the
// examples).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/tracking"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
)

// docURL is the base URI of the document in the schema compiler; it never
// leaves the process.
const docURL = "https://notifyd.invalid/openapi.json"

var docMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// apiDoc is openapi.json, decoded, with a schema compiler that holds the
// whole document as one resource so that "#/components/..." refs resolve.
type apiDoc struct {
	raw  []byte
	root map[string]any

	mu       sync.Mutex
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
}

func loadAPIDoc(t testing.TB) *apiDoc {
	t.Helper()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	root, ok := v.(map[string]any)
	if !ok {
		t.Fatal("openapi.json is not a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(docURL, root); err != nil {
		t.Fatal(err)
	}
	return &apiDoc{raw: raw, root: root, compiler: c, schemas: map[string]*jsonschema.Schema{}}
}

// escape is one JSON pointer reference token (RFC 6901).
func escape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

func pointer(toks ...string) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteString("/" + escape(t))
	}
	return b.String()
}

// at returns the value at a JSON pointer of the document.
func (d *apiDoc) at(ptr string) (any, bool) {
	var cur any = d.root
	if ptr == "" {
		return cur, true
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// deref follows a "$ref" of an object that is only a reference (a response,
// a parameter, a request body) and returns the object and its pointer.
func (d *apiDoc) deref(t testing.TB, ptr string) (map[string]any, string) {
	t.Helper()
	for range 10 {
		v, ok := d.at(ptr)
		if !ok {
			t.Fatalf("openapi.json: nothing at %s", ptr)
		}
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("openapi.json: %s is not an object", ptr)
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m, ptr
		}
		if !strings.HasPrefix(ref, "#/") {
			t.Fatalf("openapi.json: %s: only local refs, got %q", ptr, ref)
		}
		ptr = ref[1:]
	}
	t.Fatalf("openapi.json: %s: too many refs", ptr)
	return nil, ""
}

// schema compiles the schema at ptr.
func (d *apiDoc) schema(t testing.TB, ptr string) *jsonschema.Schema {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.schemas[ptr]; ok {
		return s
	}
	s, err := d.compiler.Compile(docURL + "#" + (&url.URL{Fragment: ptr}).EscapedFragment())
	if err != nil {
		t.Fatalf("openapi.json: schema at %s: %v", ptr, err)
	}
	d.schemas[ptr] = s
	return s
}

// validate checks v (decoded by jsonschema.UnmarshalJSON) against the schema
// at ptr and returns the error, if any.
func (d *apiDoc) validate(t testing.TB, ptr string, v any) error {
	t.Helper()
	return d.schema(t, ptr).Validate(v)
}

// operation is one documented path and method.
type operation struct {
	method string // upper case
	path   string // as documented: "/v1/notifications/{id}"
	ptr    string // JSON pointer of the operation object
	op     map[string]any
}

func (o operation) String() string { return o.method + " " + o.path }

func (d *apiDoc) operations(t testing.TB) []operation {
	t.Helper()
	paths, ok := d.root["paths"].(map[string]any)
	if !ok {
		t.Fatal("openapi.json: no paths")
	}
	var ops []operation
	for path, item := range paths {
		item, ok := item.(map[string]any)
		if !ok {
			t.Fatalf("openapi.json: path %s is not an object", path)
		}
		for _, m := range docMethods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			ops = append(ops, operation{method: strings.ToUpper(m), path: path, ptr: pointer("paths", path, m), op: op})
		}
	}
	slices.SortFunc(ops, func(a, b operation) int { return strings.Compare(a.String(), b.String()) })
	return ops
}

func (d *apiDoc) operation(method, path string) (operation, bool) {
	item, ok := d.root["paths"].(map[string]any)[path].(map[string]any)
	if !ok {
		return operation{}, false
	}
	m := strings.ToLower(method)
	op, ok := item[m].(map[string]any)
	if !ok {
		return operation{}, false
	}
	return operation{method: method, path: path, ptr: pointer("paths", path, m), op: op}, true
}

// mediaType names a content type without its parameters.
func mediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.TrimSpace(mt)
}

// --- routes, as the source registers them ---

// registeredPatterns returns the ServeMux patterns of server.go's routes()
// (s.mux.Handle calls) and of the server's s.api.Handle calls. Every pattern
// must be a string literal: a computed one makes this test fail until it
// learns to read it.
func registeredPatterns(t testing.TB) []string {
	t.Helper()
	fset := token.NewFileSet()
	// receiver renders the expression a method is called on: "s.mux", "s.api".
	var receiver func(e ast.Expr) string
	receiver = func(e ast.Expr) string {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			return receiver(x.X) + "." + x.Sel.Name
		case *ast.Ident:
			return x.Name
		}
		return ""
	}
	// collect returns the patterns of the Handle calls under node made on
	// the receiver recv.
	collect := func(node ast.Node, recv string) []string {
		var out []string
		ast.Inspect(node, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Handle" || receiver(sel.X) != recv || len(call.Args) != 2 {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Fatalf("%s: a route pattern that is not a string literal: teach openapi_test.go to read it",
					fset.Position(call.Pos()))
			}
			p, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
			return true
		})
		return out
	}

	f, err := parser.ParseFile(fset, "server.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, decl := range f.Decls {
		if fd, ok := decl.(*ast.FuncDecl); ok && fd.Name.Name == "routes" && fd.Recv != nil {
			patterns = append(patterns, collect(fd.Body, "s.mux")...)
		}
	}
	if len(patterns) < 20 {
		t.Fatalf("server.go: found %d routes in routes(): has it changed shape?", len(patterns))
	}

	files, err := filepath.Glob(filepath.Join("..", "..", "server", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var daemonPatterns []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		daemonPatterns = append(daemonPatterns, collect(f, "s.api")...)
	}
	if len(daemonPatterns) == 0 {
		t.Fatal("server: no s.api.Handle routes found")
	}
	return append(patterns, daemonPatterns...)
}

// patternOp turns a ServeMux pattern into its documented method and path:
// "DELETE /v1/notifications/{notifier}/{key...}" is DELETE
// /v1/notifications/{notifier}/{key}. A pattern without a method ("/riverui/")
// has method "".
func patternOp(pattern string) (method, path string) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	path = strings.ReplaceAll(path, "...}", "}")
	path = strings.TrimSuffix(path, "{$}")
	if method == "" && strings.HasSuffix(path, "/") {
		// A subtree ("/riverui/") is documented as one path with a
		// parameter for the rest: OpenAPI tools refuse a trailing slash.
		path += "{path}"
	}
	return method, path
}

// patternMux matches requests to the registered patterns, as the server does.
func patternMux(patterns []string) *http.ServeMux {
	m := http.NewServeMux()
	for _, p := range patterns {
		m.Handle(p, http.NotFoundHandler())
	}
	return m
}

// --- a running daemon ---

const openAPIConfig = `
reasons: [assigned, author, mentioned, subscribed, role-default]
queues: {fanout: 2, send: 2, digest: 1, maintenance: 1}
http: {admin_token: ` + adminToken + `, token_secret: ` + tokenSecret + `}
providers: {postmark: {username: hooks, password: hooks-secret}}
notifiers:
  comment.created:
    category: comments
    max_recipients: 3
    params:
      type: object
      required: [post_title]
      properties:
        post_title: {type: string}
        author_name: {type: string}
        url: {type: string}
    channels:
      in_app:
        title: "{{.author_name}} commented on {{.post_title}}"
        body: "Open the post to reply."
        url: "{{.url}}"
      email: {subject: "New comment on {{.post_title}}", text: "{{.author_name}} commented on {{.post_title}}"}
  security.login:
    category: security
    required: true
    channels:
      in_app: {title: "New login"}
      email: {subject: "New login", text: "Someone logged in"}
channels:
  email:
    from: "notifyd <notifyd@example.test>"
    smtp: {host: 127.0.0.1, port: %d}
  webhook: {secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
  web_push:
    vapid_public_key: BIYlLHkARxOZ3O1YBzq6o8GKjqUJSlC9JUVmohGEBKw5AtYeneWUNHkphh9oYEbjU2iWyzPWmoW-TdoVbphVYA0
    vapid_private_key: Ai9auUn6gvMwCk4Rl2kfxYI3O0005kuROvQAZ51BRQw
    subject: "mailto:ops@example.test"
`

// startDaemon runs a whole notifyd (workers, stream hub, River UI) on a
// database of its own and serves its API handler. The bundle works with the
// helpers of server_test.go.
func startDaemon(t *testing.T) *bundle {
	t.Helper()
	mailbox := smtpcapture.Start(t)
	cfg, err := config.Parse("openapi.yaml", fmt.Appendf(nil, openAPIConfig, mailbox.Port()))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	_, dbURL := pgtest.NewDBURL(t)
	cfg.Database.URL = dbURL
	cfg.HTTP.Rate.Recipient, cfg.HTTP.Rate.Admin = 0, 0 // the scenario is a burst of requests
	// The scenario opens u2's streams one after another; one it closed counts
	// until the server's handler has noticed, so the per-recipient cap (tested
	// in package stream) would refuse the next now and then.
	cfg.HTTP.MaxStreamsPerRecipient = 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := server.New(context.Background(), server.Options{Config: cfg, Listener: ln, Logger: servertest.Logger(),
		DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close) // after the daemon stopped: its hub ends the open streams
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the daemon did not stop within 30 s")
		}
		d.Close()
	})
	// Run serves its own listener once the workers, the hub and River UI
	// are started: an answer there means the daemon is up.
	resp, err := http.Get("http://" + d.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return &bundle{pool: d.Pool(), cfg: cfg, srv: srv}
}

// noRoute reports whether r is the mux's own answer for a request no route
// matches (server.go's jsonMux): 404 "no route for ..." or 405.
func noRoute(r response) bool {
	switch r.status {
	case http.StatusNotFound:
		return r.errCode() == "not_found" && strings.HasPrefix(r.errMessage(), "no route for ")
	case http.StatusMethodNotAllowed:
		return r.errCode() == "method_not_allowed"
	}
	return false
}

// raw sends a request without following redirects and decodes a JSON body.
func rawRequest(t *testing.T, b *bundle, req *http.Request) response {
	t.Helper()
	client := *b.srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if mediaType(resp.Header.Get("Content-Type")) == "application/json" {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			t.Fatalf("%s %s: %d, body is not a JSON object: %v", req.Method, req.URL, resp.StatusCode, err)
		}
	}
	return out
}

// --- the tests ---

func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc := loadAPIDoc(t)
	if v := doc.root["openapi"]; v != "3.1.0" {
		t.Fatalf(`openapi = %v, want "3.1.0"`, v)
	}
	info, _ := doc.root["info"].(map[string]any)
	if info["title"] == nil || info["version"] == nil {
		t.Fatalf("info lacks title or version: %v", info)
	}

	// Served as embedded, publicly, as JSON.
	b := setup(t)
	r := b.do(t, "GET", "/v1/openapi.json", "", nil)
	expect(t, r, 200, "")
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	if !bytes.Equal(r.raw, doc.raw) {
		t.Fatal("GET /v1/openapi.json does not serve openapi.json as it is on disk")
	}
	if r.body["openapi"] != "3.1.0" {
		t.Fatalf("served openapi = %v", r.body["openapi"])
	}

	// Every component schema compiles, and so does every schema the
	// operations use; every $ref points at something.
	schemas, _ := doc.root["components"].(map[string]any)["schemas"].(map[string]any)
	if len(schemas) == 0 {
		t.Fatal("no components.schemas")
	}
	for name := range schemas {
		doc.schema(t, pointer("components", "schemas", name))
	}
	var walk func(ptr string, v any)
	walk = func(ptr string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if !strings.HasPrefix(ref, "#/") {
					t.Errorf("%s: $ref %q is not local", ptr, ref)
				} else if _, ok := doc.at(ref[1:]); !ok {
					t.Errorf("%s: $ref %q points at nothing", ptr, ref)
				}
			}
			for k, e := range v {
				walk(ptr+"/"+escape(k), e)
			}
		case []any:
			for i, e := range v {
				walk(ptr+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("", doc.root)

	schemes, _ := doc.root["components"].(map[string]any)["securitySchemes"].(map[string]any)
	opIDs := map[string]string{}
	for _, o := range doc.operations(t) {
		id, _ := o.op["operationId"].(string)
		if id == "" {
			t.Errorf("%s: no operationId", o)
		} else if prev, dup := opIDs[id]; dup {
			t.Errorf("%s: operationId %q also used by %s", o, id, prev)
		}
		opIDs[id] = o.String()
		if s, _ := o.op["summary"].(string); s == "" {
			t.Errorf("%s: no summary", o)
		}
		if tags, _ := o.op["tags"].([]any); len(tags) == 0 {
			t.Errorf("%s: no tags", o)
		}
		// Security is explicit on every operation ([] for public ones) and
		// names declared schemes.
		sec, ok := o.op["security"].([]any)
		if !ok {
			t.Errorf("%s: no security (give [] for a public operation)", o)
		}
		for _, req := range sec {
			for name := range req.(map[string]any) {
				if _, ok := schemes[name]; !ok {
					t.Errorf("%s: security scheme %q is not declared", o, name)
				}
			}
		}
		// Path parameters: each template variable declared, in: path, required.
		declared := map[string]bool{}
		var paramPtrs []string
		itemPtr := o.ptr[:strings.LastIndex(o.ptr, "/")]
		for _, base := range []string{itemPtr, o.ptr} {
			if params, ok := doc.at(base + "/parameters"); ok {
				for i := range params.([]any) {
					paramPtrs = append(paramPtrs, base+"/parameters/"+strconv.Itoa(i))
				}
			}
		}
		for _, ptr := range paramPtrs {
			p, _ := doc.deref(t, ptr)
			if p["in"] == "path" {
				declared[p["name"].(string)] = true
				if p["required"] != true {
					t.Errorf("%s: path parameter %v is not required", o, p["name"])
				}
			}
			if p["schema"] == nil {
				t.Errorf("%s: parameter %v has no schema", o, p["name"])
			}
		}
		for _, seg := range strings.Split(o.path, "/") {
			if strings.HasPrefix(seg, "{") {
				name := strings.Trim(seg, "{}")
				if !declared[name] {
					t.Errorf("%s: path parameter %s is not declared", o, name)
				}
				delete(declared, name)
			}
		}
		for name := range declared {
			t.Errorf("%s: parameter %s is not in the path", o, name)
		}
		// Responses: at least one 2xx; every request body and every 2xx
		// with content has an example.
		responses, _ := o.op["responses"].(map[string]any)
		ok2xx := false
		for status := range responses {
			resp, rptr := doc.deref(t, o.ptr+"/responses/"+escape(status))
			if d, _ := resp["description"].(string); d == "" {
				t.Errorf("%s %s: no description", o, status)
			}
			if !strings.HasPrefix(status, "2") {
				continue
			}
			ok2xx = true
			content, _ := resp["content"].(map[string]any)
			for mt, m := range content {
				m := m.(map[string]any)
				if m["example"] == nil && m["examples"] == nil {
					t.Errorf("%s %s %s: no example (%s)", o, status, mt, rptr)
				}
			}
		}
		// Redirects only: /riverui, /admin, a tracked click and console sign-in and sign-out.
		if !ok2xx && o.path != "/riverui" && o.path != "/admin" && o.path != "/t/c/{token}" && !strings.HasPrefix(o.path, "/admin/sso/") {
			t.Errorf("%s: no 2xx response", o)
		}
		if _, ok := o.op["requestBody"]; ok {
			body, _ := doc.deref(t, o.ptr+"/requestBody")
			content, _ := body["content"].(map[string]any)
			if len(content) == 0 {
				t.Errorf("%s: request body without content", o)
			}
			for mt, m := range content {
				m := m.(map[string]any)
				if m["example"] == nil && m["examples"] == nil {
					t.Errorf("%s: request body %s: no example", o, mt)
				}
			}
		}
	}
}

func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	doc := loadAPIDoc(t)
	patterns := registeredPatterns(t)

	// Every registered route is documented, and every documented operation
	// is registered.
	documented := map[string]bool{}
	paths := map[string]bool{}
	for _, o := range doc.operations(t) {
		documented[o.String()] = true
		paths[o.path] = true
	}
	registered := map[string]bool{}
	anyMethod := map[string]bool{} // paths of method-less patterns
	for _, p := range patterns {
		method, path := patternOp(p)
		if method == "" {
			anyMethod[path] = true
			if !paths[path] {
				t.Errorf("route %q is not documented (document at least GET %s)", p, path)
			}
			continue
		}
		registered[method+" "+path] = true
		if !documented[method+" "+path] {
			t.Errorf("route %q is not documented in openapi.json (as %s %s)", p, method, path)
		}
	}
	for op := range documented {
		_, path, _ := strings.Cut(op, " ")
		if !registered[op] && !anyMethod[path] {
			t.Errorf("openapi.json documents %s, which no route registers", op)
		}
	}

	// Every documented operation is answered by a running daemon, by its
	// handler (401, 400, 200, 301...), never by the mux's "no route".
	b := startDaemon(t)
	for _, o := range doc.operations(t) {
		path := o.path
		for _, seg := range strings.Split(o.path, "/") {
			if strings.HasPrefix(seg, "{") {
				path = strings.Replace(path, seg, "x", 1)
			}
		}
		req, err := http.NewRequestWithContext(t.Context(), o.method, b.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := rawRequest(t, b, req)
		if noRoute(r) {
			t.Errorf("%s (as %s %s): the server has no such route: %d %s", o, o.method, path, r.status, r.raw)
		}
		// A documented status: unauthenticated, admin and recipient
		// operations answer 401, public ones their success.
		if _, ok := o.op["responses"].(map[string]any)[strconv.Itoa(r.status)]; !ok {
			t.Errorf("%s: answered %d, which is not documented: %s", o, r.status, r.raw)
		}
	}

	// The documented paths answer no other method: a method missing from the
	// document would be answered here.
	for path := range paths {
		if anyMethod[path] {
			continue
		}
		concrete := path
		for _, seg := range strings.Split(path, "/") {
			if strings.HasPrefix(seg, "{") {
				concrete = strings.Replace(concrete, seg, "x", 1)
			}
		}
		for _, m := range []string{"GET", "PUT", "POST", "DELETE", "PATCH"} {
			if documented[m+" "+path] {
				continue
			}
			if m == "GET" && strings.HasPrefix(path, "/admin/") {
				continue // the console's files (GET /admin/{file}) answer every GET under /admin/
			}
			req, err := http.NewRequestWithContext(t.Context(), m, b.srv.URL+concrete, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := rawRequest(t, b, req)
			if !noRoute(r) {
				t.Errorf("%s %s answers %d, but openapi.json does not document it: %s", m, path, r.status, r.raw)
			}
		}
	}
}

func TestOpenAPIExamples(t *testing.T) {
	t.Parallel()
	doc := loadAPIDoc(t)
	n := 0
	check := func(where, schemaPtr string, example any) {
		t.Helper()
		n++
		if err := doc.validate(t, schemaPtr, example); err != nil {
			t.Errorf("%s: the example does not match its schema (%s): %v", where, schemaPtr, err)
		}
	}
	// Media types and parameters: a "schema" with "example" or "examples"
	// ({"name": {"value": ...}}) beside it.
	var walk func(ptr string, v any)
	walk = func(ptr string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["schema"].(map[string]any); ok {
				if ex, ok := v["example"]; ok {
					check(ptr+"/example", ptr+"/schema", ex)
				}
				if exs, ok := v["examples"].(map[string]any); ok {
					for name := range exs {
						e, _ := doc.deref(t, ptr+"/examples/"+escape(name))
						val, ok := e["value"]
						if !ok {
							t.Errorf("%s/examples/%s: no value", ptr, name)
							continue
						}
						check(ptr+"/examples/"+name, ptr+"/schema", val)
					}
				}
				if events, ok := v["x-sse-events"].(map[string]any); ok {
					checkStreamExamples(t, doc, ptr, v, events)
				}
			}
			for k, e := range v {
				if k == "schema" || k == "example" || k == "examples" {
					continue
				}
				walk(ptr+"/"+escape(k), e)
			}
		case []any:
			for i, e := range v {
				walk(ptr+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("/paths", doc.root["paths"])
	components, _ := doc.root["components"].(map[string]any)
	for _, section := range []string{"responses", "requestBodies", "parameters"} {
		walk(pointer("components", section), components[section])
	}
	// Component schemas: their "examples" arrays (JSON Schema's keyword).
	for name, s := range components["schemas"].(map[string]any) {
		exs, _ := s.(map[string]any)["examples"].([]any)
		for i, ex := range exs {
			check(fmt.Sprintf("components.schemas.%s.examples[%d]", name, i), pointer("components", "schemas", name), ex)
		}
	}
	if n < 40 {
		t.Fatalf("only %d examples found", n)
	}
}

// checkStreamExamples checks the text/event-stream example of the stream: it
// parses as server-sent events, and each event's data matches the schema
// x-sse-events gives its name.
func checkStreamExamples(t *testing.T, doc *apiDoc, ptr string, media map[string]any, events map[string]any) {
	t.Helper()
	var texts []string
	if ex, ok := media["example"]; ok {
		texts = append(texts, fmt.Sprint(ex))
	}
	if exs, ok := media["examples"].(map[string]any); ok {
		for name := range exs {
			e, _ := doc.deref(t, ptr+"/examples/"+escape(name))
			texts = append(texts, fmt.Sprint(e["value"]))
		}
	}
	seen := map[string]bool{}
	for _, ev := range parseEvents(strings.Join(texts, "\n\n")) {
		if ev.name == "" {
			continue
		}
		if _, ok := events[ev.name]; !ok {
			t.Errorf("%s: example event %q is not in x-sse-events", ptr, ev.name)
			continue
		}
		seen[ev.name] = true
		if ev.name != "reauth" { // the stream's last event, which moves no position
			checkStreamID(t, doc, ptr+": example event "+ev.name, ev.id)
		} else if ev.id != "" {
			t.Errorf("%s: example event reauth has id %q, want none", ptr, ev.id)
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(ev.data))
		if err != nil {
			t.Errorf("%s: example event %s: data is not JSON: %v", ptr, ev.name, err)
			continue
		}
		if err := doc.validate(t, ptr+"/x-sse-events/"+escape(ev.name), v); err != nil {
			t.Errorf("%s: example event %s does not match its schema: %v", ptr, ev.name, err)
		}
	}
	for name := range events {
		if !seen[name] {
			t.Errorf("%s: no example of event %s", ptr, name)
		}
	}
}

// streamID is the form of every event id a stream sends: a cursor,
// "<epoch>.<seq>". (The documented Last-Event-ID also admits the bare seq of
// streams from before ids carried the epoch.)
var streamID = regexp.MustCompile(`^[0-9a-f]{16}\.(0|[1-9][0-9]*)$`)

// checkStreamID checks an event id: a cursor, which the document's
// Last-Event-ID and last_event_id parameters admit, so a client can send it
// back.
func checkStreamID(t testing.TB, doc *apiDoc, what, id string) {
	t.Helper()
	if !streamID.MatchString(id) {
		t.Errorf("%s: id %q is not <epoch>.<seq>", what, id)
	}
	o, _ := doc.operation("GET", "/v1/inbox/stream")
	params, _ := o.op["parameters"].([]any)
	n := 0
	for _, p := range params {
		p, _ := p.(map[string]any)
		if name := p["name"]; name != "Last-Event-ID" && name != "last_event_id" {
			continue
		}
		n++
		pattern, _ := p["schema"].(map[string]any)["pattern"].(string)
		re, err := regexp.Compile(pattern)
		if err != nil || !re.MatchString(id) {
			t.Errorf("%s: id %q does not match the pattern %q of parameter %s (%v)", what, id, pattern, p["name"], err)
		}
	}
	if n != 2 {
		t.Errorf("GET /v1/inbox/stream documents %d of the parameters Last-Event-ID and last_event_id", n)
	}
}

// sseEvent is one server-sent event; a comment (": ping") has only comment.
type sseEvent struct {
	id, name, data, comment string
}

// parseEvents parses a whole event stream.
func parseEvents(text string) []sseEvent {
	var out []sseEvent
	var ev sseEvent
	for _, line := range strings.Split(text, "\n") {
		if line == "" {
			if ev != (sseEvent{}) {
				out = append(out, ev)
			}
			ev = sseEvent{}
			continue
		}
		ev = nextEvent(ev, line)
	}
	if ev != (sseEvent{}) {
		out = append(out, ev)
	}
	return out
}

// nextEvent adds one non-empty line of an event stream to ev.
func nextEvent(ev sseEvent, line string) sseEvent {
	if line == "" {
		return sseEvent{}
	}
	field, value, _ := strings.Cut(line, ":")
	value = strings.TrimPrefix(value, " ")
	switch field {
	case "":
		ev.comment = value
	case "id":
		ev.id = value
	case "event":
		ev.name = value
	case "data":
		if ev.data != "" {
			ev.data += "\n"
		}
		ev.data += value
	}
	return ev
}

// --- responses against the schemas ---

// checker validates real responses against the document and records which
// operation and status each one exercised.
type checker struct {
	doc  *apiDoc
	mux  *http.ServeMux
	dump string

	mu   sync.Mutex
	seen map[string]bool // "GET /v1/inbox 200", "event counts"
}

func newChecker(t *testing.T) *checker {
	return &checker{doc: loadAPIDoc(t), mux: patternMux(registeredPatterns(t)), dump: os.Getenv("NOTIFYD_OPENAPI_DUMP"),
		seen: map[string]bool{}}
}

// opFor returns the documented operation a request reaches, or false when no
// route matches it.
func (c *checker) opFor(t testing.TB, method, target string) (operation, bool) {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	_, pattern := c.mux.Handler(req)
	if pattern == "" {
		return operation{}, false
	}
	m, path := patternOp(pattern)
	if m == "" {
		m = method
	}
	o, ok := c.doc.operation(m, path)
	if !ok {
		t.Fatalf("%s %s: route %q is not documented", method, target, pattern)
	}
	return o, true
}

// check validates r, the answer to method target, against the document.
func (c *checker) check(t testing.TB, method, target string, r response) {
	t.Helper()
	o, ok := c.opFor(t, method, target)
	if !ok {
		// The mux's own 404/405: the generic error shape.
		c.validateBody(t, fmt.Sprintf("%s %s (no route)", method, target), "/components/schemas/Error", r)
		return
	}
	status := strconv.Itoa(r.status)
	responses, _ := o.op["responses"].(map[string]any)
	if _, ok := responses[status]; !ok {
		t.Errorf("%s %s: status %d is not documented for %s: %s", method, target, r.status, o, r.raw)
		return
	}
	resp, rptr := c.doc.deref(t, o.ptr+"/responses/"+status)
	content, _ := resp["content"].(map[string]any)
	mt := mediaType(r.header.Get("Content-Type"))
	if len(content) == 0 {
		if len(r.raw) > 0 {
			t.Errorf("%s %s: %d has a body, none documented", method, target, r.status)
		}
	} else if _, ok := content[mt]; !ok {
		t.Errorf("%s %s: %d Content-Type %q is not documented (%s)", method, target, r.status, mt, rptr)
	} else if mt == "application/json" {
		c.validateBody(t, fmt.Sprintf("%s %s %d", method, target, r.status), rptr+"/content/application~1json/schema", r)
	}
	key := o.String() + " " + status
	c.record(t, key, r.raw)
	if code := r.errCode(); code != "" {
		c.record(t, key+" "+code, r.raw)
	}
}

// record notes that key was exercised and, the first time, dumps body.
func (c *checker) record(t testing.TB, key string, body []byte) {
	t.Helper()
	c.mu.Lock()
	first := !c.seen[key]
	c.seen[key] = true
	c.mu.Unlock()
	if first && c.dump != "" {
		name := strings.NewReplacer("/", "_", " ", "_", "{", "", "}", "").Replace(key)
		if err := os.WriteFile(filepath.Join(c.dump, name+".txt"), body, 0o644); err != nil {
			t.Error(err)
		}
	}
}

func (c *checker) validateBody(t testing.TB, what, schemaPtr string, r response) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.raw))
	if err != nil {
		t.Errorf("%s: body is not JSON: %v: %s", what, err, r.raw)
		return
	}
	if err := c.doc.validate(t, schemaPtr, v); err != nil {
		t.Errorf("%s: the body does not match the documented schema %s: %v\nbody: %s", what, schemaPtr, err, r.raw)
	}
}

// checkEvent validates a server-sent event of the inbox stream.
func (c *checker) checkEvent(t testing.TB, ev sseEvent) {
	t.Helper()
	o, _ := c.doc.operation("GET", "/v1/inbox/stream")
	resp, rptr := c.doc.deref(t, o.ptr+"/responses/200")
	media, _ := resp["content"].(map[string]any)["text/event-stream"].(map[string]any)
	events, _ := media["x-sse-events"].(map[string]any)
	if _, ok := events[ev.name]; !ok {
		t.Errorf("stream event %q is not documented", ev.name)
		return
	}
	if ev.name != "reauth" {
		checkStreamID(t, c.doc, "stream event "+ev.name, ev.id)
	} else if ev.id != "" {
		t.Errorf("stream event reauth has id %q, want none", ev.id)
	}
	c.validateBody(t, "stream event "+ev.name, rptr+"/content/text~1event-stream/x-sse-events/"+escape(ev.name),
		response{raw: []byte(ev.data)})
	c.record(t, "event "+ev.name, []byte(ev.data))
}

// call is b.do whose answer is checked against the document and must have
// the status given.
func (c *checker) call(t *testing.T, b *bundle, method, target, token string, body any, status int) response {
	t.Helper()
	r := b.do(t, method, target, token, body)
	if r.status != status {
		t.Fatalf("%s %s: status %d, want %d: %s", method, target, r.status, status, r.raw)
	}
	c.check(t, method, target, r)
	if body != nil && status < 300 {
		c.checkRequest(t, method, target, body)
	}
	return r
}

// checkRequest validates a request body the server accepted against the
// documented request body schema: the schemas must not refuse what works.
func (c *checker) checkRequest(t *testing.T, method, target string, body any) {
	t.Helper()
	var data []byte
	switch v := body.(type) {
	case string:
		data = []byte(v)
	case []byte:
		data = v
	default:
		var err error
		if data, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	o, ok := c.opFor(t, method, target)
	if !ok {
		return
	}
	if _, ok := o.op["requestBody"]; !ok {
		t.Errorf("%s %s: the server accepted a body, but %s documents none", method, target, o)
		return
	}
	_, ptr := c.doc.deref(t, o.ptr+"/requestBody")
	c.validateBody(t, fmt.Sprintf("request body of %s %s", method, target), ptr+"/content/application~1json/schema",
		response{raw: data})
}

// stream is an open GET /v1/inbox/stream.
type stream struct {
	events chan sseEvent
	cancel context.CancelFunc
	text   strings.Builder // the events read, as sent
}

// dump writes the events read so far to the dump directory, if any.
func (s *stream) dump(t *testing.T, c *checker, name string) {
	t.Helper()
	if c.dump == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(c.dump, name+".txt"), []byte(s.text.String()), 0o644); err != nil {
		t.Error(err)
	}
}

func (c *checker) openStream(t *testing.T, b *bundle, target string, header http.Header) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "GET", b.srv.URL+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("stream: %d %s", resp.StatusCode, raw)
	}
	c.check(t, "GET", target, response{status: 200, header: resp.Header})
	s := &stream{events: make(chan sseEvent, 100), cancel: cancel}
	go func() {
		defer resp.Body.Close()
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				if ev != (sseEvent{}) {
					s.events <- ev
				}
				ev = sseEvent{}
				continue
			}
			ev = nextEvent(ev, line)
		}
	}()
	t.Cleanup(cancel)
	return s
}

// next returns the next event named name (any event when name is empty),
// checking every event on the way.
func (s *stream) next(t *testing.T, c *checker, name string) sseEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended before event %s", name)
			}
			if ev.name == "" {
				fmt.Fprintf(&s.text, ":%s\n\n", ev.comment)
				continue
			}
			fmt.Fprintf(&s.text, "id: %s\nevent: %s\ndata: %s\n\n", ev.id, ev.name, ev.data)
			c.checkEvent(t, ev)
			if ev.name == name || name == "" {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event %s within 20 s", name)
		}
	}
}

func TestOpenAPIResponses(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	b := startDaemon(t)
	u2, err := notifyd.RecipientTokenAt(tokenSecret, "u2", time.Hour, time.Now()) // the daemon runs on the real clock
	if err != nil {
		t.Fatal(err)
	}

	// Ops.
	c.call(t, b, "GET", "/healthz", "", nil, 200)
	c.call(t, b, "GET", "/readyz", "", nil, 200)
	c.call(t, b, "GET", "/v1/openapi.json", "", nil, 200)
	get := func(path string) *http.Request {
		req, err := http.NewRequestWithContext(t.Context(), "GET", b.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	c.check(t, "GET", "/metrics", rawRequest(t, b, get("/metrics")))
	c.check(t, "GET", "/ui/notifyd-inbox.js", rawRequest(t, b, get("/ui/notifyd-inbox.js")))
	riverUI := func(path string, basic bool) response {
		req := get(path)
		if basic {
			req.SetBasicAuth("admin", adminToken)
		}
		r := rawRequest(t, b, req)
		c.check(t, "GET", path, r)
		return r
	}
	if r := riverUI("/riverui/", false); r.status != 401 {
		t.Fatalf("/riverui/ without credentials: %d", r.status)
	}
	if r := riverUI("/riverui/", true); r.status != 200 {
		t.Fatalf("/riverui/ with the admin token: %d", r.status)
	}
	if r := riverUI("/riverui", false); r.status != 301 {
		t.Fatalf("/riverui: %d", r.status)
	}

	// Unknown route and method: the generic error.
	c.call(t, b, "GET", "/v1/nothing", adminToken, nil, 404)
	c.call(t, b, "PATCH", "/v1/inbox", u2, nil, 405)

	// Profiles.
	profile := map[string]any{"email": "grace@example.test", "name": "Grace Hopper", "locale": "en-US",
		"timezone": "America/New_York", "webhook_url": "https://hooks.example.test/notifyd", "data": map[string]any{"plan": "pro"}}
	c.call(t, b, "PUT", "/v1/recipients/u2", adminToken, profile, 200)
	c.call(t, b, "PUT", "/v1/recipients/u3", adminToken, map[string]any{}, 200)
	c.call(t, b, "PUT", "/v1/recipients/u3", adminToken, map[string]any{"tokens_valid_after": "2000-01-01T00:00:00Z"}, 200)
	got := c.call(t, b, "GET", "/v1/recipients/u2", adminToken, nil, 200)
	c.call(t, b, "PUT", "/v1/recipients/u2", adminToken, got.raw, 200) // read, written back
	c.call(t, b, "GET", "/v1/recipients/nobody", adminToken, nil, 404)
	c.call(t, b, "PUT", "/v1/recipients/u2", adminToken, map[string]any{"email": "Grace <grace@example.test>"}, 422)
	c.call(t, b, "PUT", "/v1/recipients/u2", adminToken, map[string]any{"email": 5}, 400)
	c.call(t, b, "GET", "/v1/recipients/u2", "", nil, 401)
	c.call(t, b, "GET", "/v1/recipients/u2", u2, nil, 401)
	c.call(t, b, "GET", "/v1/webhook-secret", u2, nil, 200)
	c.call(t, b, "GET", "/v1/webhook-secret", adminToken, nil, 401)
	// Quiet hours, the recipient's and the admin twin.
	c.call(t, b, "PUT", "/v1/quiet-hours", u2, map[string]any{"quiet_hours": map[string]any{"start": "22:00", "end": "07:00"}}, 200)
	c.call(t, b, "GET", "/v1/quiet-hours", u2, nil, 200)
	c.call(t, b, "PUT", "/v1/quiet-hours", u2, map[string]any{"quiet_hours": map[string]any{"start": "22:00", "end": "22:00"}}, 422)
	c.call(t, b, "PUT", "/v1/recipients/u2/quiet-hours", adminToken, map[string]any{"quiet_hours": nil}, 200)
	c.call(t, b, "GET", "/v1/recipients/u2/quiet-hours", adminToken, nil, 200)

	// Push subscriptions.
	c.call(t, b, "GET", "/v1/push-subscriptions/vapid-key", u2, nil, 200)
	pushSub := map[string]any{"endpoint": "https://fcm.googleapis.com/fcm/send/f1:APA91b", "expirationTime": nil,
		"keys": map[string]any{"p256dh": "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
			"auth": "BTBZMqHH6r4Tts7J_aSIgg"}}
	pushCreated := c.call(t, b, "POST", "/v1/push-subscriptions", u2, pushSub, 201)
	c.call(t, b, "POST", "/v1/push-subscriptions", u2, pushSub, 200)
	c.call(t, b, "POST", "/v1/push-subscriptions", u2, map[string]any{"endpoint": "https://10.0.0.1/push",
		"keys": pushSub["keys"]}, 422)
	c.call(t, b, "POST", "/v1/push-subscriptions", u2, map[string]any{"endpoint": 1}, 400)
	c.call(t, b, "GET", "/v1/push-subscriptions", u2, nil, 200)
	c.call(t, b, "DELETE", "/v1/push-subscriptions/"+pushCreated.body["id"].(string), u2, nil, 204)
	c.call(t, b, "DELETE", "/v1/push-subscriptions/"+pushCreated.body["id"].(string), u2, nil, 404)
	c.call(t, b, "GET", "/v1/push-subscriptions", "", nil, 401)

	// Devices, the recipient's and the admin twin's list.
	phone := map[string]any{"platform": "ios", "token": strings.Repeat("a3", 32), "app": "com.example.app"}
	deviceCreated := c.call(t, b, "POST", "/v1/devices", u2, phone, 201)
	c.call(t, b, "POST", "/v1/devices", u2, phone, 200)
	c.call(t, b, "POST", "/v1/devices", u2, map[string]any{"platform": "ios", "token": "not hex", "app": "com.example.app"}, 422)
	c.call(t, b, "POST", "/v1/devices", u2, map[string]any{"platform": 1}, 400)
	c.call(t, b, "GET", "/v1/devices", u2, nil, 200)
	c.call(t, b, "GET", "/v1/recipients/u2/devices", adminToken, nil, 200)
	c.call(t, b, "DELETE", "/v1/devices/"+deviceCreated.body["id"].(string), u2, nil, 204)
	c.call(t, b, "DELETE", "/v1/devices/"+deviceCreated.body["id"].(string), u2, nil, 404)
	c.call(t, b, "GET", "/v1/devices", "", nil, 401)

	// Topics.
	c.call(t, b, "PUT", "/v1/topics/post-9/subscribers/u2", adminToken, map[string]any{"reason": "subscribed"}, 200)
	c.call(t, b, "PUT", "/v1/topics/post-9/subscribers/u3", adminToken, nil, 200)
	c.call(t, b, "PUT", "/v1/topics/post-9/subscribers/u4", adminToken, map[string]any{"reason": "watching"}, 200)
	c.call(t, b, "PUT", "/v1/topics/post-10/subscribers/u2", adminToken, nil, 200)
	c.call(t, b, "PUT", "/v1/topics/post-9/subscribers/u3", adminToken, map[string]any{"reason": "two words"}, 422)
	page := c.call(t, b, "GET", "/v1/topics/post-9/subscribers?limit=2", adminToken, nil, 200)
	next, _ := page.body["next_cursor"].(string)
	if next == "" {
		t.Fatalf("no next_cursor: %s", page.raw)
	}
	c.call(t, b, "GET", "/v1/topics/post-9/subscribers?limit=2&cursor="+url.QueryEscape(next), adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/topics/post-9/subscribers?cursor=bogus", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/topics/post-9/subscribers?limit=0", adminToken, nil, 400)
	c.call(t, b, "DELETE", "/v1/topics/post-9/subscribers/u4", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/subscriptions", u2, nil, 200)
	c.call(t, b, "GET", "/v1/subscriptions?limit=1", u2, nil, 200)
	c.call(t, b, "GET", "/v1/recipients/u2/subscriptions", adminToken, nil, 200)

	// Open u2's stream before anything reaches the inbox.
	live := c.openStream(t, b, "/v1/inbox/stream", http.Header{"Authorization": {"Bearer " + u2}})
	first := live.next(t, c, "counts")

	// Sending, and every refusal.
	send := map[string]any{"notifier": "comment.created", "key": "comment-42", "actor": "u1",
		"recipients": []any{"u1", map[string]any{"id": "u2", "reason": "author"}}, "topics": []string{"post-9"},
		"params": map[string]any{"post_title": "Hello", "author_name": "Ada", "url": "https://app.example.test/posts/9#c42"}}
	sent := c.call(t, b, "POST", "/v1/notifications", adminToken, send, 202)
	id := sent.body["id"].(string)
	c.call(t, b, "POST", "/v1/notifications", adminToken, send, 200)
	c.call(t, b, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "nope", "key": "k", "recipients": []string{"u2"}}, 404)
	c.call(t, b, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "k",
		"recipients": []string{"u2"}, "params": map[string]any{"post_title": 7}}, 422)
	c.call(t, b, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created",
		"recipients": []string{"u2"}, "params": map[string]any{"post_title": "x"}}, 422)
	c.call(t, b, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "k",
		"recipients": []string{"a", "b", "c", "d"}, "params": map[string]any{"post_title": "x"}}, 422)
	c.call(t, b, "POST", "/v1/notifications", adminToken, `{"notifier": "comment.created",`, 400)
	c.call(t, b, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "k", "colour": "red"}, 400)
	c.call(t, b, "POST", "/v1/notifications", adminToken, `{"key":"`+strings.Repeat("x", 1<<20)+`"}`, 413)
	c.call(t, b, "POST", "/v1/notifications", "", send, 401)
	c.call(t, b, "POST", "/v1/notifications", u2, send, 401)

	// Tenants: created, replaced, read, listed; a key created, used,
	// refused outside its tenant and revoked; the tenant erased.
	tenant := map[string]any{"name": "Acme", "branding": map[string]any{"logo_url": "https://acme.test/logo.png",
		"primary_color": "#ff6600", "email_from": "Acme <no-reply@acme.test>"},
		"preferences": []any{map[string]any{"scope": "*", "channel": "email", "mode": "digest"}}}
	c.call(t, b, "PUT", "/v1/tenants/acme", adminToken, tenant, 201)
	c.call(t, b, "PUT", "/v1/tenants/acme", adminToken, tenant, 200)
	c.call(t, b, "PUT", "/v1/tenants/acme", adminToken, map[string]any{"branding": map[string]any{"primary_color": "red"}}, 422)
	c.call(t, b, "PUT", "/v1/tenants/gone", adminToken, map[string]any{"name": "Gone"}, 201)
	c.call(t, b, "GET", "/v1/tenants?limit=1", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/tenants/nobody", adminToken, nil, 404)
	keyed := c.call(t, b, "POST", "/v1/tenants/acme/keys", adminToken, map[string]any{"rate": 10, "burst": 20}, 201)
	tenantKey := keyed.body["key"].(string)
	c.call(t, b, "GET", "/v1/tenants/acme", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/tenants/acme/keys", adminToken, nil, 200)
	c.call(t, b, "POST", "/v1/notifications", tenantKey, map[string]any{"notifier": "comment.created", "key": "acme-1",
		"recipients": []string{"u2"}, "params": map[string]any{"post_title": "Hi", "author_name": "Ada"}}, 202)
	c.call(t, b, "POST", "/v1/notifications", tenantKey, map[string]any{"notifier": "comment.created", "key": "acme-2",
		"tenant": "gone", "recipients": []string{"u2"}, "params": map[string]any{"post_title": "Hi", "author_name": "Ada"}}, 403)
	c.call(t, b, "GET", "/v1/notifications/"+id, tenantKey, nil, 403)
	c.call(t, b, "GET", "/v1/deliveries?tenant=acme", tenantKey, nil, 200)
	c.call(t, b, "GET", "/v1/recipients/u2/preferences", tenantKey, nil, 200)
	c.call(t, b, "PUT", "/v1/recipients/u2/preferences", tenantKey, map[string]any{"rules": []any{
		map[string]any{"scope": "*", "channel": "email", "mode": "immediate"}}}, 200)
	c.call(t, b, "GET", "/v1/recipients/u2", tenantKey, nil, 403)
	c.call(t, b, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "comment.created", "key": "t-1",
		"tenant": "nobody", "recipients": []string{"u2"}, "params": map[string]any{"post_title": "Hi", "author_name": "Ada"}}, 422)
	c.call(t, b, "DELETE", "/v1/tenants/acme/keys/"+keyed.body["id"].(string), adminToken, nil, 204)
	c.call(t, b, "DELETE", "/v1/tenants/acme/keys/"+keyed.body["id"].(string)+"0", adminToken, nil, 404)
	c.call(t, b, "GET", "/v1/deliveries?tenant=acme", tenantKey, nil, 401)
	c.call(t, b, "DELETE", "/v1/tenants/gone", adminToken, nil, 200)
	c.call(t, b, "DELETE", "/v1/tenants/gone", adminToken, nil, 404)

	// Team access: operators and operator tokens.
	c.call(t, b, "GET", "/v1/me", adminToken, nil, 200)
	c.call(t, b, "PUT", "/v1/operators/ada@example.test", adminToken, map[string]any{"name": "Ada", "role": "admin"}, 201)
	c.call(t, b, "PUT", "/v1/operators/ada@example.test", adminToken, map[string]any{"role": "viewer", "tenants": []string{"acme"}}, 200)
	c.call(t, b, "PUT", "/v1/operators/ada@example.test", adminToken, map[string]any{"role": "root"}, 422)
	c.call(t, b, "GET", "/v1/operators", adminToken, nil, 200)
	c.call(t, b, "DELETE", "/v1/operators/ada@example.test", adminToken, nil, 204)
	c.call(t, b, "DELETE", "/v1/operators/ada@example.test", adminToken, nil, 404)
	opTok := c.call(t, b, "POST", "/v1/operator-tokens", adminToken, map[string]any{"name": "bot", "role": "viewer",
		"tenants": []string{"acme"}, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, 201)
	c.call(t, b, "POST", "/v1/operator-tokens", adminToken, map[string]any{"role": "viewer", "tenants": []string{"nobody"}}, 422)
	c.call(t, b, "GET", "/v1/me", opTok.body["token"].(string), nil, 200)
	c.call(t, b, "GET", "/v1/operator-tokens", opTok.body["token"].(string), nil, 403)
	c.call(t, b, "GET", "/v1/operator-tokens", adminToken, nil, 200)
	c.call(t, b, "DELETE", "/v1/operator-tokens/"+opTok.body["id"].(string), adminToken, nil, 200)
	c.call(t, b, "DELETE", "/v1/operator-tokens/0190b8a4-0000-7000-8000-000000000000", adminToken, nil, 404)
	c.call(t, b, "GET", "/v1/me", opTok.body["token"].(string), nil, 401)
	c.call(t, b, "GET", "/v1/audit?action=operator.put", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/audit?limit=0", adminToken, nil, 400)
	c.call(t, b, "GET", "/readyz", "", nil, 200)

	// The fan-out reaches u2's stream and inbox; the email is sent.
	created := live.next(t, c, "inbox.created")
	var item struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(created.data), &item); err != nil || item.ID == "" {
		t.Fatalf("inbox.created data %s", created.data)
	}
	live.next(t, c, "counts")
	servertest.Eventually(t, 30*time.Second, "the email delivery to be sent", func() bool {
		r := b.do(t, "GET", "/v1/notifications/"+id, adminToken, nil)
		return r.status == 200 && strings.Contains(string(r.raw), `"channel":"email","reason":"author","mode":"immediate","status":"sent"`)
	})
	c.call(t, b, "GET", "/v1/notifications/"+id, adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/notifications/"+id+"?progress=true", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/notifications/"+id+"?progress=yes", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/notifications/0190b8a4-0000-7000-8000-000000000000", adminToken, nil, 404)

	// The operator's endpoints (what the console at /admin/ reads and does).
	c.call(t, b, "GET", "/v1/notifications?limit=1", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/notifications?notifier=comment.created&recipient=u2&status=fanned_out", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/notifications?cursor=bogus", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/notifications?before=yesterday", adminToken, nil, 400)
	var emailID string
	if err := b.pool.QueryRow(t.Context(), `SELECT id::text FROM notify_deliveries WHERE notification_id = $1 AND recipient = 'u2' AND channel = 'email'`,
		id).Scan(&emailID); err != nil {
		t.Fatal(err)
	}
	c.call(t, b, "GET", "/v1/deliveries/"+emailID, adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/deliveries/0190b8a4-0000-7000-8000-000000000000", adminToken, nil, 404)
	c.call(t, b, "POST", "/v1/deliveries/"+emailID+"/retry", adminToken, nil, 409) // sent
	if _, err := b.pool.Exec(t.Context(), `UPDATE notify_deliveries SET status = 'refused', last_error = '550 5.1.1 no such user' WHERE id = $1`, emailID); err != nil {
		t.Fatal(err)
	}
	c.call(t, b, "POST", "/v1/deliveries/"+emailID+"/retry", adminToken, nil, 202)
	c.call(t, b, "POST", "/v1/deliveries/0190b8a4-0000-7000-8000-000000000000/retry", adminToken, nil, 404)
	// Deliveries across notifications, the bulk retry, a delivery's message,
	// the overview.
	since := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	c.call(t, b, "GET", "/v1/deliveries?status=failed&channel=email&since="+since, adminToken, nil, 200)
	dpage := c.call(t, b, "GET", "/v1/deliveries?limit=1", adminToken, nil, 200)
	if next, _ := dpage.body["next_cursor"].(string); next == "" {
		t.Fatalf("GET /v1/deliveries?limit=1 has no next_cursor: %s", dpage.raw)
	} else {
		c.call(t, b, "GET", "/v1/deliveries?limit=1&cursor="+url.QueryEscape(next), adminToken, nil, 200)
	}
	c.call(t, b, "GET", "/v1/deliveries?status=lost", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/deliveries?cursor=bogus", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/deliveries?tenant=nobody", adminToken, nil, 400)
	c.call(t, b, "POST", "/v1/deliveries/retry?status=refused&channel=email&dry_run=true&since="+since, adminToken, nil, 200)
	c.call(t, b, "POST", "/v1/deliveries/retry?status=refused&channel=email&since="+since, adminToken, nil, 200)
	c.call(t, b, "POST", "/v1/deliveries/retry?status=sent&since="+since, adminToken, nil, 400)
	c.call(t, b, "POST", "/v1/deliveries/retry", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/deliveries/"+emailID+"/preview", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/deliveries/0190b8a4-0000-7000-8000-000000000000/preview", adminToken, nil, 404)
	c.call(t, b, "GET", "/v1/deliveries/"+emailID+"/preview?x=1", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/overview", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/overview?hours=48", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/recipients/u2/deliveries?limit=5", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/recipients/u2/deliveries?limit=0", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/notifiers", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/notifiers/comment.created/preview/email", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/notifiers/comment.created/preview/in_app?params="+url.QueryEscape(`{"post_title":"Hi","author_name":"Bo"}`), adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/notifiers/comment.created/preview/in_app?params="+url.QueryEscape(`{"post_title":7}`), adminToken, nil, 422)
	c.call(t, b, "GET", "/v1/notifiers/comment.created/preview/in_app?params=nope", adminToken, nil, 400)
	c.call(t, b, "GET", "/v1/notifiers/nope/preview/email", adminToken, nil, 404)
	c.call(t, b, "GET", "/v1/notifiers/comment.created/preview/slack", adminToken, nil, 404)
	for _, path := range []string{"/admin/", "/admin/console.js", "/admin/console.css", "/admin/nothing.js"} {
		c.check(t, "GET", path, rawRequest(t, b, get(path)))
	}
	if r := rawRequest(t, b, get("/admin")); r.status != 301 {
		t.Fatalf("/admin: %d", r.status)
	} else {
		c.check(t, "GET", "/admin", r)
	}

	// A second notification, required, so that the inbox has pages.
	c.call(t, b, "POST", "/v1/notifications", adminToken, map[string]any{"notifier": "security.login", "key": "login-7",
		"recipients": []string{"u2"}, "send_at": time.Now().Add(-time.Second).UTC().Format(time.RFC3339)}, 202)
	second := live.next(t, c, "inbox.created")
	var item2 struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(second.data), &item2); err != nil {
		t.Fatal(err)
	}

	// The inbox.
	inbox := c.call(t, b, "GET", "/v1/inbox?limit=1", u2, nil, 200)
	cursor, _ := inbox.body["next_cursor"].(string)
	if cursor == "" {
		t.Fatalf("no next_cursor: %s", inbox.raw)
	}
	c.call(t, b, "GET", "/v1/inbox?limit=1&cursor="+url.QueryEscape(cursor), u2, nil, 200)
	c.call(t, b, "GET", "/v1/inbox", u2, nil, 200)
	c.call(t, b, "GET", "/v1/inbox?filter=unread", u2, nil, 200)
	c.call(t, b, "GET", "/v1/inbox?limit=500", u2, nil, 400)
	c.call(t, b, "GET", "/v1/inbox?filter=new", u2, nil, 400)
	c.call(t, b, "GET", "/v1/inbox?cursor=AAAA", u2, nil, 400)
	c.call(t, b, "GET", "/v1/inbox", "", nil, 401)
	c.call(t, b, "GET", "/v1/inbox", adminToken, nil, 401)
	c.call(t, b, "GET", "/v1/recipients/u2/inbox?filter=all&limit=10", adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/inbox/counts", u2, nil, 200)

	// Marks, each seen on the stream.
	c.call(t, b, "POST", "/v1/inbox/seen", u2, nil, 200)
	live.next(t, c, "inbox.updated")
	c.call(t, b, "POST", "/v1/inbox/read", u2, map[string]any{"ids": []string{item.ID}}, 200)
	live.next(t, c, "inbox.updated")
	c.call(t, b, "POST", "/v1/inbox/unread", u2, map[string]any{"ids": []string{item.ID}}, 200)
	live.next(t, c, "inbox.updated")
	c.call(t, b, "POST", "/v1/inbox/read", u2, map[string]any{"all": true}, 200)
	c.call(t, b, "POST", "/v1/inbox/archive", u2, map[string]any{"ids": []string{item2.ID}}, 200)
	c.call(t, b, "POST", "/v1/inbox/"+item2.ID+"/clicked", u2, nil, 200)
	c.call(t, b, "POST", "/v1/inbox/"+item2.ID+"/clicked", adminToken, nil, 401)
	c.call(t, b, "POST", "/v1/inbox/seen", u2, map[string]any{}, 200)
	c.call(t, b, "GET", "/v1/inbox?filter=archived", u2, nil, 200)
	c.call(t, b, "POST", "/v1/inbox/read", u2, map[string]any{"ids": []string{"not-a-uuid"}}, 400)
	c.call(t, b, "POST", "/v1/inbox/archive", u2, map[string]any{"all": true}, 400)
	c.call(t, b, "POST", "/v1/inbox/unread", u2, map[string]any{}, 400)
	c.call(t, b, "POST", "/v1/inbox/read", u2, `{"ids":`+strings.Repeat(`"x",`, 1<<18)+`"x"]}`, 413)

	// Preferences.
	c.call(t, b, "GET", "/v1/preferences", u2, nil, 200)
	rules := map[string]any{"rules": []any{
		map[string]any{"scope": "*", "channel": "email", "mode": "digest"},
		map[string]any{"scope": "notifier:comment.created", "channel": "in_app", "mode": "off"}}}
	prefs := c.call(t, b, "PUT", "/v1/preferences", u2, rules, 200)
	c.call(t, b, "PUT", "/v1/preferences", u2, prefs.raw, 200) // a response written back
	c.call(t, b, "PUT", "/v1/preferences", u2, map[string]any{"rules": []any{
		map[string]any{"scope": "everything", "channel": "email", "mode": "off"},
		map[string]any{"scope": "*", "channel": "in_app", "mode": "digest"}}}, 422)
	c.call(t, b, "PUT", "/v1/preferences", u2, map[string]any{}, 400)
	c.call(t, b, "GET", "/v1/recipients/u3/preferences", adminToken, nil, 200)
	c.call(t, b, "PUT", "/v1/recipients/u3/preferences", adminToken, map[string]any{"rules": []any{}}, 200)

	// Mutes.
	until := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	c.call(t, b, "PUT", "/v1/mutes", u2, map[string]any{"target": "topic:post-9", "until": until}, 200)
	c.call(t, b, "PUT", "/v1/mutes", u2, map[string]any{"target": "notifier:comment.created"}, 200)
	c.call(t, b, "GET", "/v1/mutes", u2, nil, 200)
	c.call(t, b, "GET", "/v1/preferences", u2, nil, 200) // muted: true
	c.call(t, b, "PUT", "/v1/mutes", u2, map[string]any{"target": "notifier:nope"}, 422)
	c.call(t, b, "PUT", "/v1/mutes", u2, map[string]any{"target": "topic:post-9", "until": "2001-01-01T00:00:00Z"}, 422)
	c.call(t, b, "PUT", "/v1/mutes", u2, map[string]any{"target": "topic:post-9", "until": "tomorrow"}, 400)
	c.call(t, b, "DELETE", "/v1/mutes?target="+url.QueryEscape("topic:post-9"), u2, nil, 200)
	c.call(t, b, "DELETE", "/v1/mutes", u2, map[string]any{"target": "topic:post-9"}, 200)
	c.call(t, b, "DELETE", "/v1/mutes", u2, nil, 422)
	c.call(t, b, "PUT", "/v1/recipients/u3/mutes", adminToken, map[string]any{"target": "topic:post-10", "until": nil}, 200)
	c.call(t, b, "GET", "/v1/recipients/u3/mutes", adminToken, nil, 200)
	c.call(t, b, "DELETE", "/v1/recipients/u3/mutes?target=topic:post-10", adminToken, nil, 200)

	// Cancelling removes the item: inbox.deleted. By id, the request names
	// the notification twice.
	c.call(t, b, "DELETE", "/v1/notifications/"+id+"?notifier=comment.created&key=comment-41", adminToken, nil, 409)
	c.call(t, b, "DELETE", "/v1/notifications/"+id+"?notifier=comment.created", adminToken, nil, 400)
	c.call(t, b, "DELETE", "/v1/notifications/0190b8a4-0000-7000-8000-000000000000?notifier=comment.created&key=comment-42", adminToken, nil, 404)
	c.call(t, b, "DELETE", "/v1/notifications/"+id+"?notifier=comment.created&key=comment-42", adminToken, nil, 200)
	live.next(t, c, "inbox.deleted")
	live.next(t, c, "counts")
	c.call(t, b, "DELETE", "/v1/notifications/comment.created/comment-42", adminToken, nil, 200)
	c.call(t, b, "DELETE", "/v1/notifications/comment.created/no-such-key", adminToken, nil, 404)

	// The stream's other ways in: access_token with a cursor the live stream
	// sent, a bare seq from before cursors carried their database, then
	// cursors it cannot replay from (reset): of another database, in the
	// future, not a cursor at all. And no token.
	resumed := c.openStream(t, b, "/v1/inbox/stream?access_token="+url.QueryEscape(u2)+"&last_event_id="+url.QueryEscape(first.id), nil)
	resumed.next(t, c, "counts")
	resumed.cancel()
	bare := c.openStream(t, b, "/v1/inbox/stream?access_token="+url.QueryEscape(u2)+"&last_event_id=0", nil)
	bare.next(t, c, "counts")
	bare.cancel()
	epoch, _, _ := strings.Cut(first.id, ".")
	var reset *stream
	for _, cursor := range []string{"0123456789abcdef.0", epoch + ".999999999999999", "999999999999999", "soon", "-3"} {
		if cursor == "0123456789abcdef.0" && epoch == "0123456789abcdef" {
			t.Fatal("the test's other epoch is the database's")
		}
		s := c.openStream(t, b, "/v1/inbox/stream", http.Header{"Authorization": {"Bearer " + u2}, "Last-Event-ID": {cursor}})
		if ev := s.next(t, c, ""); ev.name != "reset" {
			t.Fatalf("Last-Event-ID %s: first event %s %s, want reset", cursor, ev.name, ev.data)
		}
		s.next(t, c, "counts")
		if reset == nil {
			reset = s
		} else {
			s.cancel()
		}
	}
	c.call(t, b, "GET", "/v1/inbox/stream", "", nil, 401)
	live.dump(t, c, "stream_live")
	reset.dump(t, c, "stream_reset")
	live.cancel()
	reset.cancel()
	// A token that expires in a second or two: the stream ends with reauth.
	short, err := notifyd.RecipientTokenAt(tokenSecret, "u2", 2*time.Second, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expiring := c.openStream(t, b, "/v1/inbox/stream", http.Header{"Authorization": {"Bearer " + short}})
	expiring.next(t, c, "reauth")
	expiring.cancel()
	c.call(t, b, "GET", "/v1/inbox/stream?last_event_id=%zz", u2, nil, 400)

	// Deliverability: the one-click unsubscribe link of an email, the
	// suppression list, bounce reports.
	unsubTok := unsubscribeToken(t, "u3", "category:comments")
	htmlPage := func(method, path string) response {
		req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/html")
		r := rawRequest(t, b, req)
		c.check(t, method, path, r)
		return r
	}
	if r := htmlPage("GET", "/v1/unsubscribe/"+unsubTok); r.status != 200 {
		t.Fatalf("unsubscribe page: %d", r.status)
	}
	if r := htmlPage("POST", "/v1/unsubscribe/"+unsubTok); r.status != 200 {
		t.Fatalf("unsubscribe from the page: %d", r.status)
	}
	c.call(t, b, "POST", "/v1/unsubscribe/"+unsubTok, "", nil, 200)
	c.call(t, b, "POST", "/v1/unsubscribe/"+unsubTok+"x", "", nil, 404)
	c.call(t, b, "GET", "/v1/unsubscribe/nope", "", nil, 404)
	c.call(t, b, "PUT", "/v1/suppressions/email/ada@example.test", adminToken, map[string]any{"reason": "manual"}, 200)
	c.call(t, b, "PUT", "/v1/suppressions/email/grace@example.test", adminToken, nil, 200)
	c.call(t, b, "PUT", "/v1/suppressions/email/not-an-address", adminToken, nil, 422)
	c.call(t, b, "PUT", "/v1/suppressions/nope/ada@example.test", adminToken, nil, 404)
	sups := c.call(t, b, "GET", "/v1/suppressions?channel=email&limit=1", adminToken, nil, 200)
	supNext, _ := sups.body["next_cursor"].(string)
	if supNext == "" {
		t.Fatalf("no next_cursor: %s", sups.raw)
	}
	c.call(t, b, "GET", "/v1/suppressions?cursor="+url.QueryEscape(supNext), adminToken, nil, 200)
	c.call(t, b, "GET", "/v1/suppressions?cursor=bogus", adminToken, nil, 400)
	c.call(t, b, "DELETE", "/v1/suppressions/email/ada@example.test", adminToken, nil, 200)
	c.call(t, b, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "email", "address": "bob@example.test", "kind": "hard", "reason": "5.1.1 user unknown"}, 200)
	c.call(t, b, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "email", "address": "bob@example.test", "kind": "soft"}, 200)
	c.call(t, b, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "email", "address": "bob@example.test", "kind": "bounced"}, 422)
	c.call(t, b, "POST", "/v1/bounces", adminToken, map[string]any{"channel": "email", "kind": "hard"}, 422)
	c.call(t, b, "DELETE", "/v1/recipients/u3?suppressions=true", adminToken, nil, 200)
	// A provider's event webhook (Postmark's: basic auth in its URL).
	pmEvent := func(user string) response {
		req, err := http.NewRequestWithContext(t.Context(), "POST", b.srv.URL+"/v1/providers/postmark/events",
			strings.NewReader(`{"RecordType":"Delivery","MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","Recipient":"john@example.com","DeliveredAt":"2026-12-01T09:00:00Z","Details":"250 OK"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.SetBasicAuth(user, "hooks-secret")
		r := rawRequest(t, b, req)
		c.check(t, "POST", "/v1/providers/postmark/events", r)
		return r
	}
	if r := pmEvent("hooks"); r.status != 200 {
		t.Fatalf("postmark event: %d %s", r.status, r.raw)
	}
	if r := pmEvent("nobody"); r.status != 401 {
		t.Fatalf("postmark event with wrong credentials: %d %s", r.status, r.raw)
	}
	c.call(t, b, "POST", "/v1/providers/sendgrid/events", "", []any{}, 404)

	// Open and click tracking: the pixel, a tracked link (302 to the
	// signed URL only), a forged token.
	trk, err := tracking.New(tokenSecret)
	if err != nil {
		t.Fatal(err)
	}
	pixelTok := trk.Token(tracking.Link{Kind: tracking.Open, Delivery: "01900000-0000-7000-8000-00000000dead", Issued: fixedNow.Add(-time.Hour)})
	if r := htmlPage("GET", "/t/o/"+pixelTok); r.status != 200 || mediaType(r.header.Get("Content-Type")) != "image/gif" {
		t.Fatalf("open pixel: %d %q", r.status, r.header.Get("Content-Type"))
	}
	clickTok := trk.Token(tracking.Link{Kind: tracking.Click, Delivery: "01900000-0000-7000-8000-00000000dead",
		Issued: fixedNow.Add(-time.Hour), URL: "https://shop.test/o/1"})
	if r := htmlPage("GET", "/t/c/"+clickTok); r.status != 302 || r.header.Get("Location") != "https://shop.test/o/1" {
		t.Fatalf("tracked link: %d %q", r.status, r.header.Get("Location"))
	}
	c.call(t, b, "GET", "/t/c/"+clickTok+"x", "", nil, 404)
	c.call(t, b, "GET", "/t/o/"+clickTok, "", nil, 404)

	// Erasure.
	c.call(t, b, "DELETE", "/v1/recipients/u2", adminToken, nil, 200)
	c.call(t, b, "DELETE", "/v1/recipients/u2", adminToken, nil, 404)
	c.call(t, b, "DELETE", "/v1/recipients/u2", "", nil, 401)

	// Every 2xx of every operation, and every stream event, was seen.
	for _, o := range c.doc.operations(t) {
		for status := range o.op["responses"].(map[string]any) {
			if strings.HasPrefix(status, "2") && !c.seen[o.String()+" "+status] {
				t.Errorf("%s %s: never exercised against a real response", o, status)
			}
		}
	}
	o, _ := c.doc.operation("GET", "/v1/inbox/stream")
	resp, _ := c.doc.deref(t, o.ptr+"/responses/200")
	events := resp["content"].(map[string]any)["text/event-stream"].(map[string]any)["x-sse-events"].(map[string]any)
	for name := range events {
		if !c.seen["event "+name] {
			t.Errorf("stream event %s: never seen", name)
		}
	}
	// And the error statuses the API promises.
	for _, want := range []string{"POST /v1/notifications 400", "POST /v1/notifications 401", "POST /v1/notifications 404",
		"POST /v1/notifications 413", "POST /v1/notifications 422", "GET /v1/notifications/{id} 404",
		"GET /v1/inbox 400", "PUT /v1/preferences 422", "PUT /v1/mutes 422", "DELETE /v1/recipients/{id} 404"} {
		if !c.seen[want] {
			t.Errorf("%s: never exercised", want)
		}
	}
	t.Logf("exercised %d operation statuses, error codes and events", len(c.seen))
}
