/*
 * agent/strmap.h - the string-keyed hash map the agent's index uses: the one
 * k8sclient has (k8sclient/strmap-int.h), under the agent's names until it is
 * exported from lib/ as <tkm/strmap.h> (issue 21: one hash map). No code here.
 */
#ifndef AGENT_STRMAP_H
#define AGENT_STRMAP_H

#include "../k8sclient/strmap-int.h"

#define agent_strmap         k8s__strmap
#define agent_strmap_release k8s__strmap_release
#define agent_strmap_get     k8s__strmap_get
#define agent_strmap_put     k8s__strmap_put
#define agent_strmap_del     k8s__strmap_del
#define agent_strmap_next    k8s__strmap_next

#endif
