// bench-clientgo: the client-go side of bench/run-watch.sh. It measures what
// bench_watch_informer measures for libk8sclient, with client-go's dynamic
// client and dynamic informer (unstructured objects, as a controller for a
// CRD would hold them), against the same apiserver:
//
//	informer -ns NS -expect N   time to sync an informer of N TritonKernelCaches, RSS after
//	watch    -ns NS -expect N   events/s of a watch from resourceVersion 0 (N synthetic ADDEDs)
//	decode   -file F -repeat R  events/s decoding a captured watch stream (no network)
//
// Each mode prints one JSON line on stdout.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	restclientwatch "k8s.io/client-go/rest/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

var tkc = schema.GroupVersionResource{Group: "tkm.io", Version: "v1alpha1", Resource: "tritonkernelcaches"}

func rssKB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "VmRSS:") {
			v, _ := strconv.ParseInt(strings.Fields(s.Text())[1], 10, 64)
			return v
		}
	}
	return -1
}

func emit(m map[string]any) {
	b, _ := json.Marshal(m)
	fmt.Println(string(b))
}

func client(kubeconfig string) dynamic.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-clientgo:", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = -1, 0 // as controller-runtime: rely on APF
	return dynamic.NewForConfigOrDie(cfg)
}

func informer(kubeconfig, ns string, expect int) {
	dc := client(kubeconfig)
	start := time.Now()
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, 0, ns, nil)
	inf := f.ForResource(tkc).Informer()
	stop := make(chan struct{})
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		fmt.Fprintln(os.Stderr, "bench-clientgo: informer did not sync")
		os.Exit(1)
	}
	syncMs := time.Since(start).Milliseconds()
	n := len(inf.GetStore().ListKeys())
	if n != expect {
		fmt.Fprintf(os.Stderr, "bench-clientgo: informer holds %d objects, expected %d\n", n, expect)
		os.Exit(1)
	}
	time.Sleep(2 * time.Second)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	emit(map[string]any{"client": "client-go", "mode": "informer", "objects": n, "sync_ms": syncMs,
		"rss_kb": rssKB(), "heap_inuse_kb": ms.HeapInuse / 1024})
	close(stop)
}

func watchBench(kubeconfig, ns string, expect int) {
	dc := client(kubeconfig)
	start := time.Now()
	w, err := dc.Resource(tkc).Namespace(ns).Watch(context.Background(),
		metav1.ListOptions{ResourceVersion: "0", AllowWatchBookmarks: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-clientgo: watch:", err)
		os.Exit(1)
	}
	n := 0
	for ev := range w.ResultChan() {
		if _, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type != "BOOKMARK" {
			n++
		}
		if n >= expect {
			break
		}
	}
	w.Stop()
	el := time.Since(start)
	emit(map[string]any{"client": "client-go", "mode": "watch", "events": n, "ms": el.Milliseconds(),
		"events_per_s": float64(n) / el.Seconds(), "rss_kb": rssKB()})
}

// decodeBench runs client-go's own watch decoding (json framer, streaming
// decoder into metav1.WatchEvent, the embedded object into Unstructured, as
// the dynamic client does) and puts every object into a cache.Store.
func decodeBench(file string, repeat int) {
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-clientgo:", err)
		os.Exit(1)
	}
	scheme := kruntime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	outer := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{})
	n := 0
	start := time.Now()
	for r := 0; r < repeat; r++ {
		store := cache.NewStore(cache.MetaNamespaceKeyFunc)
		rc := io.NopCloser(bytes.NewReader(data))
		d := restclientwatch.NewDecoder(streaming.NewDecoder(kjson.Framer.NewFrameReader(rc), outer),
			unstructured.UnstructuredJSONScheme)
		for {
			_, obj, err := d.Decode()
			if err != nil {
				break
			}
			if err := store.Add(obj); err != nil {
				fmt.Fprintln(os.Stderr, "bench-clientgo: store:", err)
				os.Exit(1)
			}
			n++
		}
	}
	el := time.Since(start)
	emit(map[string]any{"client": "client-go", "mode": "decode", "events": n, "ms": el.Milliseconds(),
		"events_per_s": float64(n) / el.Seconds(), "bytes": len(data) * repeat})
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bench-clientgo informer|watch|decode [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	kc := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig")
	ns := fs.String("ns", "default", "namespace")
	expect := fs.Int("expect", 10000, "objects/events expected")
	file := fs.String("file", "", "captured watch stream")
	repeat := fs.Int("repeat", 1, "decode passes")
	_ = fs.Parse(os.Args[2:])
	switch os.Args[1] {
	case "informer":
		informer(*kc, *ns, *expect)
	case "watch":
		watchBench(*kc, *ns, *expect)
	case "decode":
		decodeBench(*file, *repeat)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}
