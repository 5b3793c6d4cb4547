package tierbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/minio/minio-go/v7"
)

// The S3 arms measure S3-compatible storage as a candidate for the remote
// tier, raw: the bench's pages put and got as objects of one bucket, with
// no kvpilot backend between (the remote tier has none for S3; these
// figures are what one would start from). With "auto" they run against a
// SeaweedFS server (`weed server -s3`, one process holding its master,
// volume, filer and S3 gateway) that the run starts when weed is on PATH.

const s3Bucket = "kvpilot-bench"

// openS3 binds the S3 arms to endpoint (host:port, or an http:// URL);
// "auto" starts a SeaweedFS server under dir when weed is installed, and
// "" or "off" skips them.
func (f *Fixture) openS3(dir, endpoint string) error {
	endpoint, err := serverAddr(endpoint, "weed", filepath.Join(dir, "seaweedfs"), 8, f.startSeaweed)
	if endpoint == "" || err != nil {
		return err
	}
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		endpoint = u.Host
	}
	c, err := minio.New(endpoint, &minio.Options{Secure: false})
	if err != nil {
		return fmt.Errorf("s3 client for %s: %w", endpoint, err)
	}
	// A fresh server answers before its volumes have registered; the
	// bucket is made once it takes writes.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		err = c.MakeBucket(ctx, s3Bucket, minio.MakeBucketOptions{})
		var resp minio.ErrorResponse
		if err == nil || errors.As(err, &resp) && (resp.Code == "BucketAlreadyOwnedByYou" || resp.Code == "BucketAlreadyExists") {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("s3 at %s: make bucket %s: %w", endpoint, s3Bucket, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The raw arms put the pages as objects and get them back.
	raw := f.rawArm("raw/", func(ctx context.Context, name string, page []byte) error {
		_, err := c.PutObject(ctx, s3Bucket, name, bytes.NewReader(page), int64(len(page)),
			minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true})
		return err
	}, func(ctx context.Context, name string) ([]byte, error) {
		obj, err := c.GetObject(ctx, s3Bucket, name, minio.GetObjectOptions{})
		if err != nil {
			return nil, err
		}
		defer obj.Close()
		b := make([]byte, f.lay.PageBytes())
		_, err = io.ReadFull(obj, b)
		return b, err
	})
	f.stores = append(f.stores, remoteStore{"s3", "s3_raw_put", "s3_raw_get", "", "", raw, nil})
	return raw(true)(1) // the first put waits for a volume to be assigned
}

// startSeaweed runs a throwaway SeaweedFS server with its S3 gateway on
// loopback ports and returns the gateway's address.
func (f *Fixture) startSeaweed(wdir string, ports []int) (string, error) {
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	cmd := exec.Command("weed", "server", "-dir="+wdir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+p(0), "-master.port.grpc="+p(1), "-master.volumeSizeLimitMB=1024",
		"-volume.port="+p(2), "-volume.port.grpc="+p(3), "-volume.max=8",
		"-filer", "-filer.port="+p(4), "-filer.port.grpc="+p(5),
		"-s3", "-s3.port="+p(6), "-s3.port.grpc="+p(7))
	log, err := os.Create(filepath.Join(wdir, "weed.log"))
	if err != nil {
		return "", err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	return "127.0.0.1:" + p(6), f.startServer(cmd)
}
