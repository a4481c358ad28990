package coretable

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// Pods converts pods and pod lists to kube-apiserver's pod Table.
var Pods rest.TableConvertor = convertor{columns: PodColumns, row: func(o runtime.Object, now time.Time) (metav1.TableRow, bool) {
	p, ok := o.(*indexing.Pod)
	if !ok {
		return metav1.TableRow{}, false
	}
	return PodRow(p, now), true
}}

// Nodes converts nodes and node lists to kube-apiserver's node Table.
var Nodes rest.TableConvertor = convertor{columns: NodeColumns, row: func(o runtime.Object, now time.Time) (metav1.TableRow, bool) {
	n, ok := o.(*indexing.Node)
	if !ok {
		return metav1.TableRow{}, false
	}
	return NodeRow(n, now), true
}}

type convertor struct {
	columns []metav1.TableColumnDefinition
	row     func(runtime.Object, time.Time) (metav1.TableRow, bool)
}

// ConvertToTable is kube-apiserver's: every column (kubectl hides priority 1
// unless -o wide), none when the options say NoHeaders (watch events after
// the first), and the list's resourceVersion, continue and remaining count.
func (c convertor) ConvertToTable(_ context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	noHeaders := false
	if tableOptions != nil {
		opts, ok := tableOptions.(*metav1.TableOptions)
		if !ok {
			return nil, fmt.Errorf("unrecognized type %T for table options, can't display tabular output", tableOptions)
		}
		noHeaders = opts != nil && opts.NoHeaders
	}
	table := &metav1.Table{}
	if !noHeaders {
		table.ColumnDefinitions = c.columns
	}
	now := time.Now()
	objs := []runtime.Object{obj}
	if meta.IsListType(obj) {
		var err error
		if objs, err = meta.ExtractList(obj); err != nil {
			return nil, errors.NewInternalError(err)
		}
	}
	table.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, o := range objs {
		if held, ok := o.(interface{ Decoded() runtime.Object }); ok {
			o = held.Decoded() // the cache's object: a row reads its decoded form
		}
		r, ok := c.row(o, now)
		if !ok {
			return nil, errors.NewInternalError(fmt.Errorf("no table row for %T", o))
		}
		table.Rows = append(table.Rows, r)
	}
	if m, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
		table.Continue = m.GetContinue()
		table.RemainingItemCount = m.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	return table, nil
}
