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
	"strings"

	"github.com/moby/moby/client"
)

// The Docker engine on the test machines cannot pull, so the node image is
// built locally FROM scratch out of the host's own redis-server and the
// shared libraries it loads, plus libfaketime for clock faults. It is built
// once per content (the tag carries a hash of the files) and kept.

const (
	imageRepo = "redlock-chaos-redis"
	// libfaketimePath is where Debian's libfaketime package puts it.
	libfaketimePath = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
	// libcPath is preloaded after libfaketime: preloading libfaketime alone
	// makes redis-server hang at start (jemalloc recursion).
	libcPath = "/lib/x86_64-linux-gnu/libc.so.6"
)

// imageFile is one file copied from the host into the image, at the same path.
type imageFile struct {
	host, image string
}

// imageFiles lists what the image holds: the real redis-server binary
// (resolving the Debian symlink), every library ldd lists for it, and
// libfaketime with its libraries when the host has it.
func imageFiles() (files []imageFile, faketime bool, err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, false, fmt.Errorf("%w: redis-server not found on PATH (run make deps): %v", ErrBackendUnavailable, err)
	}
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return nil, false, fmt.Errorf("chaos: resolve %s: %w", bin, err)
	}
	files = append(files, imageFile{host: real, image: "/usr/bin/redis-server"})
	libs, err := lddLibraries(real)
	if err != nil {
		return nil, false, err
	}
	if _, statErr := os.Stat(libfaketimePath); statErr == nil {
		faketime = true
		files = append(files, imageFile{host: libfaketimePath, image: libfaketimePath})
		more, err := lddLibraries(libfaketimePath)
		if err != nil {
			return nil, false, err
		}
		libs = append(libs, more...)
		libs = append(libs, libcPath)
	}
	slices.Sort(libs)
	for _, l := range slices.Compact(libs) {
		files = append(files, imageFile{host: l, image: l})
	}
	return files, faketime, nil
}

// lddLine matches "libx.so => /path (0x...)" and "/lib64/ld-linux... (0x...)".
var lddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)`)

func lddLibraries(path string) ([]string, error) {
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return nil, fmt.Errorf("chaos: ldd %s: %w", path, err)
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

const dockerfile = `FROM scratch
COPY rootfs/ /
ENTRYPOINT ["/usr/bin/redis-server"]
`

// buildContext returns the tar stream docker build reads and a hash of its
// content, which names the image.
func buildContext(files []imageFile) ([]byte, string, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	sum := sha256.New()
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

// ensureImage returns the name of the node image, building it if the
// engine does not have it yet. It never pulls.
func ensureImage(ctx context.Context, cli client.APIClient) (name string, faketime bool, err error) {
	files, faketime, err := imageFiles()
	if err != nil {
		return "", false, err
	}
	tarball, hash, err := buildContext(files)
	if err != nil {
		return "", false, err
	}
	name = imageRepo + ":" + hash
	if _, err := cli.ImageInspect(ctx, name); err == nil {
		return name, faketime, nil
	}
	res, err := cli.ImageBuild(ctx, bytes.NewReader(tarball), client.ImageBuildOptions{
		Tags:        []string{name},
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Labels:      map[string]string{"org.quorumlabs.redlock": "chaos-node"},
	})
	if err != nil {
		return "", false, fmt.Errorf("chaos: build image %s: %w", name, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return "", false, fmt.Errorf("chaos: build image %s: %w", name, err)
	}
	// The build streams JSON messages; a failed step reports "error".
	if bytes.Contains(out, []byte(`"error"`)) {
		return "", false, fmt.Errorf("chaos: build image %s: %s", name, lastLine(out))
	}
	if _, err := cli.ImageInspect(ctx, name); err != nil {
		return "", false, errors.Join(fmt.Errorf("chaos: image %s missing after build: %s", name, lastLine(out)), err)
	}
	return name, faketime, nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
