package chaos

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/client"

	"github.com/quorumlabs/redlock/redistest"
)

// The Docker engine on the test machines cannot pull, so the node image is
// built locally FROM scratch out of the host's own server binary and the
// shared libraries it loads, plus libfaketime for clock faults. It is built
// once per content (the tag carries a hash of the files) and kept. The
// server is the build REDLOCK_TEST_SERVER names (redistest.LookupServer):
// the system's redis-server, or Redis 8.6 or Valkey 9.1 from make servers,
// which start through their own glibc's loader in the image as on the host.

const (
	imageRepo = "redlock-chaos-redis"
	// privateRoot is where a build under ServersDir goes in the image.
	privateRoot = "/opt/redlock"
)

// imageFile is one file copied from the host into the image.
type imageFile struct {
	host, image string
}

// nodeImage is what goes into the image and how it starts.
type nodeImage struct {
	files      []imageFile
	entrypoint []string
	// preload is LD_PRELOAD for a node under libfaketime; empty when the
	// host has no libfaketime.
	preload string
}

// imageFiles lists what the image holds for build: the real server binary
// (resolving the Debian symlink), every library its loader lists for it,
// and libfaketime with what it needs when the host has it.
func imageFiles(build redistest.ServerBuild) (img nodeImage, err error) {
	if build.Dir != "" {
		return privateImageFiles(build)
	}
	real, err := filepath.EvalSymlinks(build.Binary)
	if err != nil {
		return img, fmt.Errorf("chaos: resolve %s: %w", build.Binary, err)
	}
	img.files = append(img.files, imageFile{host: real, image: "/usr/bin/redis-server"})
	img.entrypoint = []string{"/usr/bin/redis-server"}
	libs, err := lddLibraries(real)
	if err != nil {
		return img, err
	}
	if preload := build.FakeTimePreload(); fileExists(preload[0]) {
		more, err := lddLibraries(preload[0])
		if err != nil {
			return img, err
		}
		libs = append(append(libs, more...), preload...)
		img.preload = strings.Join(preload, ":")
	}
	slices.Sort(libs)
	for _, l := range slices.Compact(libs) {
		img.files = append(img.files, imageFile{host: l, image: l})
	}
	return img, nil
}

// privateImageFiles is imageFiles for a build under ServersDir: its files
// go under privateRoot, the system libraries it takes keep their paths, and
// the entry point is its loader, as its bin/redis-server script does on the
// host (the image has no shell to run the script).
func privateImageFiles(build redistest.ServerBuild) (img nodeImage, err error) {
	inImage := func(host string) string {
		if rel, ok := strings.CutPrefix(host, build.Dir+"/"); ok {
			return privateRoot + "/" + rel
		}
		return host
	}
	list := func(path string) ([]string, error) {
		return listLibraries(build.Loader(), "--library-path", build.LibraryPath(), "--list", path)
	}
	bin := build.RealBinary()
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return img, fmt.Errorf("chaos: resolve %s: %w", bin, err)
	}
	// The binary keeps its name: the server reads its role from argv[0]
	// (valkey-check-rdb, which it links to, is another program).
	img.files = append(img.files, imageFile{host: real, image: inImage(bin)})
	libs, err := list(bin)
	if err != nil {
		return img, err
	}
	libs = append(libs, build.Loader())
	if preload := build.FakeTimePreload(); fileExists(preload[0]) {
		more, err := list(preload[0])
		if err != nil {
			return img, err
		}
		libs = append(append(libs, more...), preload...)
		var in []string
		for _, p := range preload {
			in = append(in, inImage(p))
		}
		img.preload = strings.Join(in, ":")
	}
	slices.Sort(libs)
	for _, l := range slices.Compact(libs) {
		img.files = append(img.files, imageFile{host: l, image: inImage(l)})
	}
	var libPath []string
	for _, d := range strings.Split(build.LibraryPath(), ":") {
		libPath = append(libPath, inImage(d))
	}
	img.entrypoint = []string{inImage(build.Loader()), "--library-path", strings.Join(libPath, ":"), inImage(bin)}
	return img, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// lddLine matches "libx.so => /path (0x...)" and "/lib64/ld-linux... (0x...)".
var lddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)`)

func lddLibraries(path string) ([]string, error) {
	return listLibraries("ldd", path)
}

// listLibraries runs ldd, or a loader with --list, and returns the
// libraries it names.
func listLibraries(cmd string, args ...string) ([]string, error) {
	path := args[len(args)-1]
	out, err := exec.Command(cmd, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("chaos: %s %s: %w", filepath.Base(cmd), strings.Join(args, " "), err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		if m := lddLine.FindStringSubmatch(line); m != nil {
			libs = append(libs, m[1])
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("chaos: ldd %s listed no libraries (a static binary is not expected here)", path)
	}
	return libs, nil
}

// dockerfile is the image's Dockerfile for an entry point.
func dockerfile(entrypoint []string) string {
	quoted := make([]string, len(entrypoint))
	for i, e := range entrypoint {
		quoted[i] = strconv.Quote(e)
	}
	return "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [" + strings.Join(quoted, ", ") + "]\n"
}

// buildContext returns the tar stream docker build reads and a hash of its
// content, which names the image.
func buildContext(img nodeImage) ([]byte, string, error) {
	files, dockerfile := img.files, dockerfile(img.entrypoint)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	sum := sha256.New()
	io.WriteString(sum, dockerfile)
	addDir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, Typeflag: tar.TypeDir})
	}
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		return nil, "", err
	}
	if _, err := io.WriteString(tw, dockerfile); err != nil {
		return nil, "", err
	}
	// Mount points: the data dir and the dir holding the faketime file.
	for _, d := range []string{"rootfs", "rootfs/data", "rootfs/faketime", "rootfs/tmp"} {
		if err := addDir(d); err != nil {
			return nil, "", err
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f.host) // follows symlinks: the image gets real files
		if err != nil {
			return nil, "", fmt.Errorf("chaos: read %s for the image: %w", f.host, err)
		}
		fmt.Fprintf(sum, "%s %d\n", f.image, len(data))
		sum.Write(data)
		hdr := &tar.Header{Name: "rootfs" + f.image, Mode: 0o755, Size: int64(len(data))}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, "", err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), hex.EncodeToString(sum.Sum(nil))[:12], nil
}

// ensureImage returns the name of the node image of build, building it if
// the engine does not have it yet, and the LD_PRELOAD that runs a node of
// it under libfaketime (empty without libfaketime). It never pulls.
func ensureImage(ctx context.Context, cli client.APIClient, build redistest.ServerBuild) (name, preload string, err error) {
	img, err := imageFiles(build)
	if err != nil {
		return "", "", err
	}
	tarball, hash, err := buildContext(img)
	if err != nil {
		return "", "", err
	}
	name = imageRepo + ":" + hash
	if _, err := cli.ImageInspect(ctx, name); err == nil {
		return name, img.preload, nil
	}
	res, err := cli.ImageBuild(ctx, bytes.NewReader(tarball), client.ImageBuildOptions{
		Tags:        []string{name},
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Labels:      map[string]string{"org.quorumlabs.redlock": "chaos-node"},
	})
	if err != nil {
		return "", "", fmt.Errorf("chaos: build image %s: %w", name, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return "", "", fmt.Errorf("chaos: build image %s: %w", name, err)
	}
	// The build streams JSON messages; a failed step reports "error".
	if bytes.Contains(out, []byte(`"error"`)) {
		return "", "", fmt.Errorf("chaos: build image %s: %s", name, lastLine(out))
	}
	if _, err := cli.ImageInspect(ctx, name); err != nil {
		return "", "", errors.Join(fmt.Errorf("chaos: image %s missing after build: %s", name, lastLine(out)), err)
	}
	return name, img.preload, nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
