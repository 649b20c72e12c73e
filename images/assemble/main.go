// Command assemble writes a one-layer OCI image layout from scratch, with no daemon and no
// registry: the layer holds the given files plus /etc/passwd and /etc/group naming the image's
// non-root user and an empty /tmp; the config carries the user, entrypoint, env and labels.
// hack/images.sh builds the scheduler image with it (a static Go binary needs nothing else) and
// loads the layout into podman with skopeo. Every timestamp is the epoch and every entry is
// written in order, so the same inputs give the same image digest: the script compares digests
// to skip work.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

type entry struct {
	mode int64
	dir  bool
	data []byte
}

func main() {
	var adds, labels, envs list
	out := flag.String("out", "", "OCI layout directory to write (replaced)")
	ref := flag.String("ref", "latest", "tag recorded in the layout (org.opencontainers.image.ref.name)")
	uid := flag.Int("uid", 65532, "numeric user and group the image runs as")
	user := flag.String("user-name", "nonroot", "name of that user in /etc/passwd")
	entrypoint := flag.String("entrypoint", "[]", "entrypoint as a JSON array")
	flag.Var(&adds, "add", "SRC=DST: copy file SRC into the image at DST, keeping its mode (repeatable)")
	flag.Var(&labels, "label", "KEY=VALUE image label (repeatable)")
	flag.Var(&envs, "env", "KEY=VALUE environment variable (repeatable)")
	flag.Parse()
	if err := run(*out, *ref, *uid, *user, *entrypoint, adds, labels, envs); err != nil {
		fmt.Fprintln(os.Stderr, "assemble:", err)
		os.Exit(1)
	}
}

func run(out, ref string, uid int, user, entrypoint string, adds, labels, envs list) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil {
		return fmt.Errorf("-entrypoint: %w", err)
	}
	files := map[string]entry{
		"etc/passwd": {mode: 0o644, data: []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/nonexistent:/sbin/nologin\n", user, uid, uid, user))},
		"etc/group": {mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\n%s:x:%d:\n", user, uid))},
		"tmp":       {mode: 0o1777, dir: true},
	}
	for _, a := range adds {
		src, dst, ok := strings.Cut(a, "=")
		if !ok || !path.IsAbs(dst) {
			return fmt.Errorf("-add %q: want SRC=/absolute/DST", a)
		}
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		files[strings.TrimPrefix(path.Clean(dst), "/")] = entry{mode: int64(st.Mode().Perm()), data: data}
	}
	layerTar, err := tarOf(files)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1),
		types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.User = fmt.Sprintf("%d:%d", uid, uid)
	cfg.Config.Entrypoint = ep
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, envs...)
	cfg.Config.Labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("-label %q: want KEY=VALUE", l)
		}
		cfg.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
	})); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Println(digest.String())
	return nil
}

// tarOf writes files (and every parent directory they need) in path order, owned by root,
// timestamped at the epoch.
func tarOf(files map[string]entry) ([]byte, error) {
	all := map[string]entry{}
	for name, e := range files {
		all[name] = e
		for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = entry{mode: 0o755, dir: true}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	for _, n := range names {
		e := all[n]
		h := &tar.Header{Name: n, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, n+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !e.dir {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
