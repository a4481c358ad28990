package readonly

import (
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// ConvertToTable builds a Table of one object or a list, one row per object,
// keeping the list's resourceVersion and continue token so kubectl can page
// and watch from it.
func ConvertToTable(obj runtime.Object, columns []metav1.TableColumnDefinition, cells func(runtime.Object) ([]interface{}, error)) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: columns}
	obj = decodedOf(obj)
	objs := []runtime.Object{obj}
	if meta.IsListType(obj) {
		var err error
		if objs, err = meta.ExtractList(obj); err != nil {
			return nil, errors.NewInternalError(err)
		}
		if lm, err := meta.ListAccessor(obj); err == nil {
			table.ResourceVersion = lm.GetResourceVersion()
			table.Continue = lm.GetContinue()
			table.RemainingItemCount = lm.GetRemainingItemCount()
		}
	} else if m, err := meta.Accessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	table.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, o := range objs {
		o = decodedOf(o)
		c, err := cells(o)
		if err != nil {
			return nil, errors.NewInternalError(err)
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: c, Object: runtime.RawExtension{Object: o}})
	}
	return table, nil
}

// Age formats a creation time as kubectl does ("5m", "2d3h"), "<unknown>" when unset.
func Age(created metav1.Time, now time.Time) string {
	if created.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(created.Time))
}
